"""Training the TLM: one ``train_loop_per_worker(config)``, run by Ray Train or directly.

The loss counts the **decision tokens only** (:mod:`tlm.model.batching`): the original TLM's
loss over the whole sentence spends most of a small model's capacity learning to copy prompts.
A fine-tuning row may carry a weight (``label`` = best latency of its task /
its latency): with ``loss_weighting="latency"`` a schedule twice as slow as the task's best
counts half, so the model learns most from the fastest schedules while still seeing several
per sketch.

The loop talks to its surroundings through a *session* (:class:`Session`): where batches come
from, how the model is placed, where reports and checkpoints go. :class:`LocalSession` keeps
rows in memory and checkpoints in a directory (tests, the benchmark of the bare loop); inside a
Ray Train worker it is ``cluster.train_session.RayTrainSession`` (dataset shards, DDP,
``ray.train.report`` and restore), so this module never imports Ray. The launcher is
``cluster/train_job.py``.
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

from tlm.model.batching import batch_encoding, encode_batch, masked_loss
from tlm.model.checkpoint import load_optimizer_state, load_train_state, save_checkpoint
from tlm.model.network import ModelConfig, build_model, load_weights

STAGES = ("pretrain", "finetune")
WEIGHTINGS = ("none", "latency")


@dataclass
class TrainConfig:
    """How to train; stored in every checkpoint's ``tlm_model.json``."""

    stage: str = "pretrain"  # pretrain: sampled programs of every hardware; finetune: one hardware's fastest
    preset: str = "small"  # model shape (tlm.model.network.PRESETS); finetune keeps the base model's
    epochs: float = 3.0  # passes over the training split (fractions allowed)
    max_steps: int = 0  # > 0: stop after this many optimizer steps instead
    batch_size: int = 16  # sentences per worker per step
    lr: float = 1e-3  # peak learning rate (AdamW); small models like a high one
    min_lr_ratio: float = 0.1  # cosine decay ends at lr * this
    warmup_steps: int = 20  # linear warm-up steps
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    grad_clip: float = 1.0  # max global gradient norm
    loss_weighting: str = "none"  # none | latency (fine-tuning rows weighted by (best/latency) ** weight_power)
    weight_power: float = 1.0  # sharpens the latency weighting: 4 makes a row at half the best's speed count 1/16
    eval_every: int = 100  # steps between evaluations and checkpoints (and one at the end)
    eval_batches: int = 0  # > 0: evaluate on at most this many batches per worker
    log_every: int = 10  # steps between progress lines
    seed: int = 0  # model initialisation and data order
    layers: int = 0  # finetune: > 0 keeps only the base's first N blocks (a smaller, cheaper student)

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r}; known: {', '.join(STAGES)}")
        if self.loss_weighting not in WEIGHTINGS:
            raise ValueError(f"unknown loss weighting {self.loss_weighting!r}; known: {', '.join(WEIGHTINGS)}")
        for name in ("batch_size", "eval_every", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_batches < 0:
            raise ValueError(f"eval_batches must be >= 0, got {self.eval_batches}")
        if self.weight_power <= 0:
            raise ValueError(f"weight_power must be > 0, got {self.weight_power}")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ValueError("either epochs or max_steps must be > 0")
        if self.layers < 0 or (self.layers and self.stage != "finetune"):
            raise ValueError(f"layers keeps a fine-tuning base's first N blocks (N >= 1), got {self.layers} "
                             f"for stage {self.stage}; a pretrained model's shape is its preset")


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``lr * min_lr_ratio`` at ``total_steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# ------------------------------------------------------------------------------------------
# sessions: where batches come from and where reports and checkpoints go
# ------------------------------------------------------------------------------------------
class Session(Protocol):
    """What the loop needs from its surroundings (one per worker)."""

    world_rank: int
    world_size: int

    def has(self, split: str) -> bool: ...

    def batches(self, split: str, batch_size: int, *, seed: int | None, drop_last: bool) -> Iterator[dict]: ...

    def restored(self) -> contextlib.AbstractContextManager[str | None]: ...

    def prepare(self, model: Any) -> tuple[Any, Any]: ...

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None: ...


def _columns(batch: dict, weighted: bool, power: float = 1.0) -> tuple[list[str], list[int], list[float] | None]:
    texts = [str(t) for t in batch["text"]]
    plens = [int(p) for p in batch["prompt_len"]]
    weights = None
    if weighted:
        weights = [1.0 if w is None or (isinstance(w, float) and math.isnan(w)) else float(w) ** power
                   for w in batch["label"]]
    return texts, plens, weights


class LocalSession:
    """Rows in memory, one worker, checkpoints under ``checkpoint_root`` (tests, bare-loop bench)."""

    world_rank, world_size = 0, 1

    def __init__(self, rows: dict[str, list[dict]], checkpoint_root: str, resume_from: str | None = None) -> None:
        self.rows, self.root, self.resume_from = rows, checkpoint_root, resume_from
        self.reports: list[dict] = []
        self.checkpoints: list[str] = []

    def has(self, split: str) -> bool:
        return bool(self.rows.get(split))

    def batches(self, split: str, batch_size: int, *, seed: int | None, drop_last: bool) -> Iterator[dict]:
        rows = list(self.rows.get(split, []))
        if seed is not None:
            random.Random(seed).shuffle(rows)
        stop = len(rows) - len(rows) % batch_size if drop_last else len(rows)
        for i in range(0, stop, batch_size):
            chunk = rows[i : i + batch_size]
            yield {k: [r.get(k) for r in chunk] for k in ("text", "prompt_len", "label")}

    @contextlib.contextmanager
    def restored(self) -> Iterator[str | None]:
        yield self.resume_from

    def prepare(self, model: Any) -> tuple[Any, Any]:
        """The model on the CPU, unwrapped: one worker needs no DDP."""
        import torch

        return model, torch.device("cpu")

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        self.reports.append(dict(metrics))
        if checkpoint_dir is not None:
            import shutil

            dest = os.path.join(self.root, f"checkpoint_{len(self.checkpoints):06d}")
            shutil.copytree(checkpoint_dir, dest)
            self.checkpoints.append(dest)


def _all_sum(values: list[float], device: Any) -> list[float]:
    """Sum ``values`` over the workers (identity without torch.distributed)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


# ------------------------------------------------------------------------------------------
# the loop
# ------------------------------------------------------------------------------------------
def evaluate(model: Any, session: Any, enc: dict, cfg: TrainConfig, device: Any) -> dict:
    """Held-out loss and decision-token accuracy (unweighted, summed over every worker)."""
    import torch

    if not session.has("test"):
        return {}
    model.eval()
    sums = [0.0, 0.0, 0.0, 0.0]  # loss*tokens, tokens, correct, sentences
    with torch.no_grad():
        for i, batch in enumerate(session.batches("test", cfg.batch_size, seed=None, drop_last=False)):
            if cfg.eval_batches and i >= cfg.eval_batches:
                break
            texts, plens, _ = _columns(batch, False)
            b = encode_batch(texts, plens, **enc)
            out = model(input_ids=b["input_ids"].to(device), attention_mask=b["attention_mask"].to(device))
            loss, wsum, correct, counted = masked_loss(out.logits, b["labels"].to(device), b["weights"])
            sums[0] += float(loss) * float(counted)
            sums[1] += float(counted)
            sums[2] += float(correct)
            sums[3] += len(texts)
    model.train()
    loss_tok, tokens, correct, sentences = _all_sum(sums, device)
    if not tokens:
        return {}
    return {"eval_loss": loss_tok / tokens, "eval_accuracy": correct / tokens, "eval_sentences": int(sentences)}


def grow_vocabulary(model: Any, size: int) -> None:
    """Give ``model`` embedding rows up to ``size`` words, each new one the mean of its trained
    rows (deterministic, so every worker starts the same; the output layer is tied to them):
    how a base fine-tuned into a newer language version meets the words it never saw."""
    import torch

    old = model.get_input_embeddings().weight.shape[0]
    if size <= old:
        return
    model.resize_token_embeddings(size, mean_resizing=False)
    with torch.no_grad():
        w = model.get_input_embeddings().weight
        w[old:] = w[:old].mean(0)


def keep_blocks(model: Any, n: int) -> None:
    """Keep ``model``'s first ``n`` transformer blocks (``TrainConfig.layers``): a student that
    starts from a base's embeddings and lower blocks costs ``n`` / the base's blocks of its forward
    (what a served greedy schedule spends most of its time in). Nothing when it has ``n`` or fewer."""
    import torch

    blocks = model.transformer.h
    if len(blocks) > n:
        model.transformer.h = torch.nn.ModuleList(list(blocks)[:n])
        model.config.n_layer = n


def train_loop_per_worker(config: dict) -> None:
    """Train a TLM; the body of every Ray Train worker (or called directly with a LocalSession).

    ``config``: ``train`` (a :class:`TrainConfig` as dict), ``model_config`` (a
    :class:`ModelConfig` as dict), ``tokenizer_dir``, ``total_steps``, ``steps_per_epoch``,
    ``session`` (a :class:`Session`), optionally ``base_model_path`` (fine-tuning starts
    there), ``info`` (stored in checkpoints) and ``threads``.
    """
    import torch

    from tlm.model.tokenizer import load_tokenizer

    cfg = TrainConfig(**config["train"])
    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    mcfg = ModelConfig(**config["model_config"])
    session: Session = config["session"]
    tokenizer = load_tokenizer(config["tokenizer_dir"])
    enc = batch_encoding(tokenizer, mcfg.n_positions)
    total, per_epoch = int(config["total_steps"]), max(1, int(config["steps_per_epoch"]))
    rank = session.world_rank

    with session.restored() as resume_dir:
        state = load_train_state(resume_dir) if resume_dir else None
        start = resume_dir if state else config.get("base_model_path")
        model = load_weights(start) if start else build_model(mcfg, seed=cfg.seed)
        if not state and start:  # a base: it may learn a newer language's words (cluster.train_job.prepare)
            grow_vocabulary(model, mcfg.vocab_size)
            keep_blocks(model, mcfg.n_layer)
        model.config.tlm_language = mcfg.language
        model, device = session.prepare(model)  # placed (and DDP-wrapped) before the optimizer sees it
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        if state:
            load_optimizer_state(resume_dir, optimizer)
    state = state or {"step": 0, "epoch": 0, "batch_in_epoch": 0, "history": []}
    # said in every report (so in tlm_model.json's final metrics): a worker's printed line reaches
    # the driver through Ray's log stream, which may drop it when the run ends soon after
    resumed = {"resumed_from_step": state["step"]} if state["step"] else {}
    if state["step"] and rank == 0:
        print(f"[train] resumed at step {state['step']} (epoch {state['epoch']})", flush=True)

    weighted = cfg.loss_weighting == "latency"
    t_log, tok_log = time.perf_counter(), 0
    run_tokens, run_time = 0, 0.0  # this worker's training throughput (no evaluation, no checkpoints)
    model.train()
    while state["step"] < total:
        skip = state["batch_in_epoch"]
        for i, batch in enumerate(session.batches("train", cfg.batch_size, seed=cfg.seed + state["epoch"], drop_last=True)):
            if i < skip:  # batches consumed before the resumed checkpoint
                continue
            t_step = time.perf_counter()
            texts, plens, weights = _columns(batch, weighted, cfg.weight_power)
            b = encode_batch(texts, plens, weights=weights, **enc)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(state["step"], cfg, total)
            out = model(input_ids=b["input_ids"].to(device), attention_mask=b["attention_mask"].to(device))
            loss, _, correct, counted = masked_loss(out.logits, b["labels"].to(device), b["weights"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            loss_value = loss.detach().item()
            state["step"] += 1
            state["batch_in_epoch"] = i + 1
            tok_log += int(b["attention_mask"].sum())
            run_tokens += int(b["attention_mask"].sum())
            run_time += time.perf_counter() - t_step
            if rank == 0 and state["step"] % cfg.log_every == 0:
                dt = time.perf_counter() - t_log
                print(f"[train] step {state['step']}/{total} epoch {state['epoch']} loss {loss_value:.4f} "
                      f"acc {float(correct) / max(1, int(counted)):.3f} lr {optimizer.param_groups[0]['lr']:.2e} "
                      f"{tok_log / dt:.0f} tokens/s per worker", flush=True)
                t_log, tok_log = time.perf_counter(), 0
            done = state["step"] >= total
            if done or state["step"] % cfg.eval_every == 0:
                metrics = {"step": state["step"], "epoch": state["epoch"] + state["batch_in_epoch"] / per_epoch,
                           "train_loss": loss_value, "tokens_per_s_per_worker": run_tokens / max(run_time, 1e-9),
                           **resumed, **evaluate(model, session, enc, cfg, device)}
                state["history"].append(metrics)
                _report(session, metrics, model, tokenizer, mcfg, optimizer, state, config.get("info"))
            if done:
                break
        else:
            state["epoch"] += 1
            state["batch_in_epoch"] = 0
            if state["step"] == 0 and skip == 0:
                raise ValueError("the training split has fewer sentences than one batch per worker")


def _report(session: Any, metrics: dict, model: Any, tokenizer: Any, mcfg: ModelConfig, optimizer: Any,
            state: dict, info: dict | None) -> None:
    """Every worker reports; rank 0 attaches a checkpoint (model, optimizer, loop position)."""
    if session.world_rank != 0:
        session.report(metrics, None)
        return
    with tempfile.TemporaryDirectory(prefix="tlm-ckpt-") as d:
        save_checkpoint(d, model=model, tokenizer=tokenizer, cfg=mcfg, optimizer=optimizer, state=state,
                        info={**(info or {}), "metrics": metrics})
        session.report(metrics, d)
    print(f"[train] step {state['step']}: " + " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()), flush=True)
