"""The "mlp" objective of the cost model (``collectors.cost_model``): MetaSchedule's own MLP ranker.

The same records and the same per-store features as the XGBoost cost model (``PerStoreFeature``,
one row per buffer store), learned by MetaSchedule's ``SegmentSumMLP`` (each store encoded by an
MLP, the encodings summed over the program, two residual layers, one score) with MetaSchedule's
own loss (``lambda_rank_loss``: LambdaRank on best/latency, which weights a wrongly ordered pair by
how much it costs the ranking's NDCG, so the top of the order is what it learns first) and its own
training step (``SegmentSumMLPTrainer.train_step``: Adam, gradient clipping). Issue 32, item 7:
judged against the XGBoost model on the same pools (``bench/studies/rankers.py``).

What is reused from ``tvm.s_tir.meta_schedule.cost_model.mlp_model`` and what is not, and why:

* ``SegmentSumMLP``, ``SegmentSumMLPConfig``, ``TrainerConfig``, ``State``, ``SegmentDataLoader``,
  ``SegmentSumMLPTrainer.train_step`` / ``predict_step`` and ``lambda_rank_loss`` are used as they are.
* ``SegmentSumMLPTrainer.train_full`` is not called; its epoch loop is repeated here (Adam, StepLR
  every tenth of the epochs at 0.8, a fifth of the groups held out, the epoch of least held-out
  loss kept), because as is it (a) passes ``verbose=True`` to ``StepLR``, which this torch no longer
  accepts (TypeError); (b) gives ``StepLR`` a step of ``epochs // 10``, 0 (a ZeroDivisionError)
  below 10 epochs; (c) draws its held-out groups from Python's global ``random`` and leaves a
  temporary file behind per fit; (d) ends on a batch of one record when the count is 1 mod 128,
  where ``SegmentSumMLP`` returns a 0-d score and ``lambda_rank_loss`` fails.
* ``SegmentDataLoader`` divides the features by the column maxima of *whatever it holds*, so
  MetaSchedule's ``predict_incremental`` scores a pool under the pool's own maxima, not those the
  net was trained under: a program's score would depend on the company it is scored in. Here one
  divisor, the maxima of the training rows, is kept with the weights and replaces each loader's own.
* ``State.save`` / ``load`` pickle a numpy object array of the data; the weights and the divisor are
  saved with safetensors instead (the records stay in ``cost_model.tar``, as for every objective).
* Training runs on the CPU even where CUDA is present (the trainer would pick it): CUDA's
  ``scatter_add`` (the segment sum) is not deterministic, and a 20K-record key trains in minutes.
  And on one torch thread (:func:`_one_thread`): the net is small, so on a busy 2-core host two
  threads made an epoch 40x slower (waiting on each other), and one thread's sums do not depend
  on how many cores the host has.
"""
from __future__ import annotations

import copy
import math
import random
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np

#: The file the MLP's weights and feature divisor are saved in, beside ``cost_model.tar``.
MLP_FILE = "cost_model_mlp.safetensors"
#: Records scored at once by :meth:`MLPRanker.score` (bounds the memory of a large pool).
SCORE_BATCH = 4096


class MLPRanker:
    """A trained ``SegmentSumMLP`` and the feature divisor it was trained under; ``score`` gives
    one score per program, higher is faster (LambdaRank orders best/latency descending)."""

    def __init__(self, net: Any, norm: np.ndarray, test_loss: float | None = None) -> None:
        self.net = net.eval()
        self.norm = np.asarray(norm, dtype="float32")
        self.test_loss = test_loss  # the kept epoch's loss on the held-out groups (None: none held out)

    @classmethod
    def fit(cls, feats: Sequence[np.ndarray], ys: np.ndarray, sizes: Sequence[int], *, seed: int,
            epochs: int, test_split: float = 0.2) -> "MLPRanker":
        """Train on ``feats`` (per-store rows of each record) with targets ``ys`` (best/latency
        within each group of consecutive ``sizes`` records), as ``train_full`` does (see the
        module's docstring); the same data and ``seed`` give the same weights (torch's global RNG
        is forked, the caller's left as it was)."""
        import torch
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import (
            SegmentSumMLPConfig, SegmentSumMLPTrainer, State, TrainerConfig)

        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        groups = list(range(len(sizes)))
        held = set(random.Random(seed).sample(groups, k=math.floor(len(groups) * test_split)))
        train_idx = [i for g in groups if g not in held for i in range(bounds[g], bounds[g + 1])]
        test_idx = [i for g in sorted(held) for i in range(bounds[g], bounds[g + 1])]
        norm = _column_max([feats[i] for i in train_idx])
        with torch.random.fork_rng(devices=[]), _one_thread():
            torch.manual_seed(seed)
            state = State(SegmentSumMLPConfig(input_dim=feats[0].shape[1]))
            trainer = SegmentSumMLPTrainer(TrainerConfig(num_epoch_full=epochs), state)
            trainer.device = "cpu"
            bs = trainer.batch_size
            train = _loader([feats[i] for i in train_idx], ys[train_idx], norm, bs, shuffle=True)
            test = _loader([feats[i] for i in test_idx], ys[test_idx], norm, bs, shuffle=False) if test_idx else None
            trainer.optimizer = torch.optim.Adam(state.model.parameters(), lr=trainer.learning_rate,
                                                 weight_decay=trainer.weight_decay)
            scheduler = torch.optim.lr_scheduler.StepLR(trainer.optimizer, step_size=max(1, epochs // 10), gamma=0.8)
            best, kept = math.inf, None
            for _ in range(epochs):
                state.model.train()
                loss = None
                for batch, data in enumerate(train):
                    if len(data[0]) > 1:  # a ranking loss needs two records (and a 0-d score fails)
                        loss = trainer.train_step(data, batch, loss)
                scheduler.step()
                if test is not None:
                    state.model.eval()
                    with torch.no_grad():
                        losses = [trainer.predict_step(d)[1] for d in test if len(d[0]) > 1]
                    # MetaSchedule's measure: the mean over the batches but the last (a partial one)
                    loss_now = float(np.mean(losses[:-1]) if len(losses) > 1 else losses[0]) if losses else math.inf
                    if loss_now < best:
                        best, kept = loss_now, copy.deepcopy(state.model.state_dict())
            if kept is not None:
                state.model.load_state_dict(kept)
        return cls(state.model, norm, best if kept is not None else None)

    def score(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """One score per program from its per-store rows, each divided by the training maxima."""
        import torch

        out = []
        with torch.no_grad(), _one_thread():
            for a in range(0, len(features), SCORE_BATCH):
                part = features[a:a + SCORE_BATCH]
                sizes = torch.tensor([len(f) for f in part], dtype=torch.int32)
                rows = torch.from_numpy(np.concatenate(part).astype("float32") / self.norm)
                out.append(np.atleast_1d(self.net(sizes, rows).numpy()))
        return np.concatenate(out).astype("float64") if out else np.zeros(0)

    def save(self, path: str) -> None:
        """Weights, the divisor and the net's shape as safetensors (tensors and strings only)."""
        import torch
        from safetensors.torch import save_file

        tensors = {f"net.{k}": v.detach().cpu().contiguous() for k, v in self.net.state_dict().items()}
        tensors["norm"] = torch.from_numpy(self.norm.copy())
        first = self.net.encoder[0]
        meta = {"input_dim": str(first.in_features), "hidden_dim": str(first.out_features),
                "test_loss": "" if self.test_loss is None else repr(self.test_loss)}
        save_file(tensors, path, metadata=meta)

    @classmethod
    def load(cls, path: str) -> "MLPRanker":
        """The ranker :meth:`save` wrote at ``path``."""
        from safetensors import safe_open
        from safetensors.torch import load_file
        from tvm.s_tir.meta_schedule.cost_model.mlp_model import SegmentSumMLP

        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
        tensors = load_file(path)
        net = SegmentSumMLP(input_dim=int(meta["input_dim"]), hidden_dim=int(meta["hidden_dim"]))
        net.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("net.")})
        loss = meta.get("test_loss") or None
        return cls(net, tensors["norm"].numpy(), float(loss) if loss else None)


@contextmanager
def _one_thread() -> Iterator[None]:
    """torch's intra-op threads set to one for the block, the caller's count restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _column_max(feats: Sequence[np.ndarray]) -> np.ndarray:
    """``SegmentDataLoader``'s divisor (each column's maximum, 1 where it is 0) over ``feats``' rows."""
    norm = np.concatenate(feats).max(axis=0).astype("float32")
    norm[norm == 0] = 1.0
    return norm


def _loader(feats: Sequence[np.ndarray], ys: np.ndarray, norm: np.ndarray, batch_size: int, *,
            shuffle: bool) -> Any:
    """MetaSchedule's ``SegmentDataLoader`` of these records, its features divided by ``norm``
    instead of by its own maxima (see the module's docstring)."""
    import torch
    from tvm.s_tir.meta_schedule.cost_model.mlp_model import SegmentDataLoader

    loader = SegmentDataLoader(list(feats), np.asarray(ys, dtype="float32"), batch_size=batch_size, shuffle=shuffle)
    loader.features = torch.from_numpy(np.concatenate(feats).astype("float32") / norm)
    return loader
