"""A cost model of one hardware key, learned from the corpus: ranks schedules without measuring.

MetaSchedule's own XGBoost cost model (``tvm.s_tir.meta_schedule.cost_model.XGBModel`` over
``PerStoreFeature``: per buffer store, the loop structure, arithmetic, memory footprint and
reuse of the scheduled program) trained on every record of the key at once, instead of the
few hundred candidates a search has seen of its own task. The target is MetaSchedule's:
per workload, best latency / this latency (1 for the task's best, ~0 for a failure), so the
model learns which program *of a task* is faster, not how heavy a task is.

Why it matters: a schedule that computes a reduction inside a loop of its consumer repeats
the whole reduction for every output element; the per-store features count the arithmetic of
the program as scheduled, so such a program scores low before anything runs. The generator
(``tlm.service.generator``) ranks the model's candidates with it, and a model-seeded search
starts from it (pre-trained on the corpus instead of random guesses for its first batches).

Features come from replaying each stored trace on the task's module (``collectors.tir``):
about 3.5 ms a record on 2 cores, so a 20K-record key trains in a couple of minutes.
"""
from __future__ import annotations

import json
import logging
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

from collectors.hardware import Hardware
from collectors.tasks import Task

logger = logging.getLogger(__name__)

#: The file a saved cost model is (MetaSchedule's XGBModel.save: booster + the feature groups).
COST_MODEL_FILE = "cost_model.tar"
META_FILE = "cost_model.json"
#: The cost MetaSchedule gives a failed candidate (its ``_mean_cost``): ratio to the best ~ 0.
FAILED_COST = 1e10
#: The training objectives a cost model can have (``CostModelConfig.objective``).
OBJECTIVES = ("metaschedule", "pairwise", "mlp")


@dataclass
class CostModelConfig:
    """What the cost model learns from."""

    hardware_key: str
    exclude_workloads: tuple[str, ...] = ()  # never trained on (a held-out model's workloads)
    #: other keys whose records train it too: a key with a small slice borrows what another CPU
    #: measured of *which schedule of a task is faster* (each key's speeds compared only within
    #: that key's own measurements of a workload, its features computed for its own target)
    also_from: tuple[str, ...] = ()
    max_records_per_workload: int = 0  # 0: every record; else the fastest N and a spread of the rest
    with_errors: bool = True  # failed candidates are examples of what not to write (cost ~ 0)
    seed: int = 43  # XGBoost's seed: the same data gives the same model
    #: what the booster learns: "metaschedule" (MetaSchedule's own: squared error on best/latency,
    #: each record weighted by that ratio, so slow programs barely count) or "pairwise" (within
    #: each workload, every pair of records ordered, each pair weighted by the gap between their
    #: speeds: a slow program scored above a fast one costs the most, which is what ranking a
    #: model's pool, slow samples among them, needs) or "mlp" (MetaSchedule's MLP ranker: its
    #: SegmentSumMLP on the same features with its LambdaRank loss, ``collectors.mlp_cost_model``;
    #: the booster is then MetaSchedule's, kept for the format and for a seeded search)
    objective: str = "metaschedule"
    rounds: int = 300  # boosting rounds of the "pairwise" objective (metaschedule stops on its own)
    epochs: int = 50  # training epochs of the "mlp" objective (MetaSchedule's num_epoch_full)
    #: only records whose ``tuner`` starts with one of these (empty: every record): e.g. a ranker of
    #: a model's pools fitted on those pools measured (``tlm collect --strategy tlm-pool``, tuner
    #: ``tlm-pool:<model>``), since the searches' records are another distribution of programs. On
    #: 20 held-out Zen 3 pools it picked 0.67x MetaSchedule@256 fitted on 2,786 pool records of
    #: training workloads, against 0.63x for the key's cost model (and 0.76x leave-one-task-out on
    #: those pools themselves): ``bench/results/rankers/README.md``
    tuners: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown cost model objective {self.objective!r} (accepted: {', '.join(OBJECTIVES)})")


@dataclass
class FitSummary:
    """What training saw and where the time went."""

    workloads: int = 0
    records: int = 0
    errors: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    by_key: dict[str, int] = field(default_factory=dict)  # hardware key -> records trained on
    features_s: float = 0.0
    train_s: float = 0.0


class CostModel:
    """MetaSchedule's XGBModel trained on a corpus for one hardware key; ``predict`` gives each
    schedule of a task a score, higher is faster (an estimate of best latency / its latency).
    With the "mlp" objective, ``mlp`` (an ``MLPRanker``) scores instead, and ``xgb`` holds the
    records (and a booster for a search) as for the other objectives."""

    def __init__(self, xgb: Any, config: CostModelConfig, summary: FitSummary | None = None,
                 held_out: dict | None = None, mlp: Any = None) -> None:
        self.xgb = xgb
        self.mlp = mlp
        self.config = config
        self.summary = summary or FitSummary()
        self.held_out = held_out or {}  # the held-out models and :func:`evaluate` on their workloads

    # -- training ----------------------------------------------------------------------------
    @classmethod
    def fit(cls, corpus: Any, hardware: Hardware, config: CostModelConfig | None = None, *,
            progress: bool = False) -> "CostModel":
        """Train on every (or every sampled) record of ``hardware``'s key in ``corpus``, one
        feature group per workload, workloads in ``config.exclude_workloads`` left out."""
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup, XGBConfig, XGBModel

        config = config or CostModelConfig(hardware_key=hardware.key)
        summary = FitSummary()
        xgb = XGBModel(config=XGBConfig(seed=config.seed), num_warmup_samples=0, verbose_eval=0,
                       adaptive_training=False, num_tuning_cores=max(1, hardware.cores))
        t0 = time.perf_counter()
        for wkey, feats, costs in _corpus_groups(corpus, hardware, config, summary, progress=progress):
            xgb.data[wkey] = FeatureGroup(group_hash=wkey, features=feats, costs=costs)
            xgb.data_size += len(feats)
        summary.features_s = time.perf_counter() - t0
        if not xgb.data:
            raise ValueError(f"the corpus holds no usable record of {config.hardware_key} to train a cost model on")
        t1 = time.perf_counter()
        mlp = _train_on_groups(xgb, config)
        summary.train_s = time.perf_counter() - t1
        logger.info("cost model of %s: %d records of %d workloads, features %.0f s, training %.0f s",
                    config.hardware_key, summary.records, summary.workloads, summary.features_s, summary.train_s)
        return cls(xgb, config, summary, mlp=mlp)

    # -- use -----------------------------------------------------------------------------------
    def predict(self, task: Task, hardware: Hardware, schedules: Sequence[Any]) -> np.ndarray:
        """One score per schedule (postprocessed ``Schedule`` of ``task``), higher is faster."""
        if not schedules:
            return np.zeros(0)
        return self.score(features_of(task, hardware, schedules))

    def score(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """One score per program from its precomputed :func:`features_of` rows: a pool's
        features are computed once and scored by several models (``bench/studies/rankers.py``)."""
        if not len(features):
            return np.zeros(0)
        if self.mlp is not None:
            return self.mlp.score(list(features))
        return self.xgb._predict(list(features)).astype("float64")  # noqa: SLF001 - predict() wants a TuneContext per call

    def refit(self, **changes: Any) -> "CostModel":
        """A new cost model trained on this one's own feature groups (the records it was fitted
        on, as ``cost_model.tar`` stores them) with ``changes`` to its config, e.g.
        ``objective="pairwise", rounds=60``: another objective judged on the same data without
        replaying a record. This one is left as it is."""
        config = replace(self.config, **changes)
        xgb = self.search_model()
        t0 = time.perf_counter()
        mlp = _train_on_groups(xgb, config)
        return CostModel(xgb, config, replace(self.summary, train_s=time.perf_counter() - t0), self.held_out, mlp)

    def search_model(self) -> Any:
        """A copy of the MetaSchedule XGBModel for a search to use and update (this one is left
        as it is): it starts from the corpus's booster and retrains, corpus and the search's own
        measurements together, after every measured batch."""
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup, XGBModel

        xgb = XGBModel(config=self.xgb.config, num_warmup_samples=0, verbose_eval=0, adaptive_training=False)
        for key, g in self.xgb.data.items():
            xgb.data[key] = FeatureGroup(group_hash=key, features=list(g.features), costs=g.costs.copy())
        xgb.data_size = self.xgb.data_size
        xgb.booster = self.xgb.booster.copy() if self.xgb.booster is not None else None
        return xgb

    # -- files ----------------------------------------------------------------------------------
    def save(self, directory: str) -> str:
        """Write ``cost_model.tar`` (MetaSchedule's format) and ``cost_model.json`` (config and
        summary) into ``directory``, and the MLP's weights (``cost_model_mlp.safetensors``) for
        the "mlp" objective; returns the tar's path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, COST_MODEL_FILE)
        with warnings.catch_warnings():  # XGBoost's note that a ".bin" name is saved as UBJSON
            warnings.simplefilter("ignore", UserWarning)
            self.xgb.save(path)
        if self.mlp is not None:
            from collectors.mlp_cost_model import MLP_FILE

            self.mlp.save(os.path.join(directory, MLP_FILE))
        with open(os.path.join(directory, META_FILE), "w") as f:
            json.dump({"config": asdict(self.config), "summary": asdict(self.summary), "held_out": self.held_out},
                      f, indent=2)
        return path

    @classmethod
    def load(cls, directory: str) -> "CostModel":
        """The cost model :meth:`save` wrote into ``directory``."""
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBModel

        path = os.path.join(directory, COST_MODEL_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no cost model in {directory} (expected {COST_MODEL_FILE}; make one with "
                                    "`tlm cost-model fit --hardware KEY --out DIR`)")
        with open(os.path.join(directory, META_FILE)) as f:
            meta = json.load(f)
        cfg = meta["config"]
        cfg["exclude_workloads"] = tuple(cfg.get("exclude_workloads") or ())
        cfg["also_from"] = tuple(cfg.get("also_from") or ())
        cfg["tuners"] = tuple(cfg.get("tuners") or ())
        xgb = XGBModel(num_warmup_samples=0, verbose_eval=0, adaptive_training=False)
        with warnings.catch_warnings():  # ... and read back as UBJSON
            warnings.simplefilter("ignore", UserWarning)
            xgb.load(path)
        config, mlp = CostModelConfig(**cfg), None
        if config.objective == "mlp":
            from collectors.mlp_cost_model import MLP_FILE, MLPRanker

            mlp = MLPRanker.load(os.path.join(directory, MLP_FILE))
        return cls(xgb, config, FitSummary(**meta.get("summary", {})), meta.get("held_out"), mlp)


def evaluate(cost_model: CostModel, corpus: Any, hardware: Hardware, workloads: Sequence[str], *,
             min_records: int = 10) -> dict:
    """How well ``cost_model`` ranks the measured records of ``workloads`` (held out from its
    training): per workload with at least ``min_records`` successes, Spearman's rank correlation
    of score and speed, and the best latency over the latency of its top-1 and best of top-5
    (1.0: it picked the fastest); geometric means over the workloads, beside a random pick's
    expectation (mean of best/latency)."""
    from collectors.tasks import task_from_index
    from collectors.tir import schedule_of

    rows = {w["workload_key"]: w for w in corpus.workloads()}
    table = corpus.scan({"hardware_key": hardware.key, "workload_key": list(workloads)},
                        columns=["workload_key", "trace_json", "latency_s"])
    by_workload = _by_workload(table.to_pylist())
    per: list[dict] = []
    for wkey in sorted(set(by_workload) & set(rows)):
        part = [r for r in by_workload[wkey] if r["latency_s"] is not None]
        if len(part) < min_records:
            continue
        task = task_from_index(rows[wkey])
        score = cost_model.predict(task, hardware, [schedule_of(task.mod, r["trace_json"]) for r in part])
        lat = np.asarray([r["latency_s"] for r in part])
        order = np.argsort(-score, kind="stable")
        per.append({"task": task.task_name, "records": len(part), "spearman": spearman(score, -lat),
                    "top1": float(lat.min() / lat[order[0]]), "top5": float(lat.min() / lat[order[:5]].min()),
                    "random": float(np.mean(lat.min() / lat))})
    gm = lambda k: float(np.exp(np.mean(np.log([p[k] for p in per])))) if per else None  # noqa: E731
    return {"workloads": len(per), "records": sum(p["records"] for p in per),
            "spearman_mean": float(np.mean([p["spearman"] for p in per])) if per else None,
            "top1_geomean": gm("top1"), "top5_geomean": gm("top5"), "random_geomean": gm("random"), "tasks": per}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ranks by order; ties broken by position)."""
    ra, rb = np.argsort(np.argsort(a, kind="stable")), np.argsort(np.argsort(b, kind="stable"))
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def features_of(task: Task, hardware: Hardware, schedules: Sequence[Any]) -> list[np.ndarray]:
    """MetaSchedule's per-store features of each scheduled program (one row per buffer store)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    ctx = ms.TuneContext(mod=task.mod, target=hardware.tvm_target(), num_threads=max(1, hardware.cores))
    cands = [ms.MeasureCandidate(s, ArgInfo.from_prim_func(s.mod["main"])) for s in schedules]
    extractor = ms.feature_extractor.PerStoreFeature()
    return [x.numpy().astype("float32") for x in extractor.extract_from(ctx, cands)]


def _train_on_groups(xgb: Any, config: CostModelConfig) -> Any:
    """Train the booster once on every group, with the normalisation ``XGBModel.update`` uses
    (group min cost / cost). ``update`` takes one task's candidates at a time and retrains on
    each call; a corpus has hundreds of tasks, so the groups are filled first and trained once.
    For "mlp", also MetaSchedule's MLP on the same groups and targets, returned (else None): the
    booster (MetaSchedule's loss, seconds) still goes in ``cost_model.tar``, whose loader fails on
    a tar without one, and is what a seeded search updates."""
    groups = list(xgb.data.values())
    feats = [f for g in groups for f in g.features]
    with np.errstate(divide="ignore", invalid="ignore"):
        ys = np.concatenate([np.divide(g.min_cost, g.costs, out=np.zeros_like(g.costs), where=g.costs != 0)
                             for g in groups])
    sizes = np.asarray([len(g.features) for g in groups])
    if config.objective == "pairwise":
        xgb.booster = _train_pairwise(xgb.config.to_dict(), feats, ys, sizes, config.rounds)
    else:
        xgb._train(xs=feats, ys=ys)  # noqa: SLF001 - XGBModel has no public bulk fit
    xgb.last_train_size = xgb.data_size
    if config.objective != "mlp":
        return None
    from collectors.mlp_cost_model import MLPRanker

    return MLPRanker.fit(feats, ys, sizes, seed=config.seed, epochs=config.epochs)


def _train_pairwise(params: dict, feats: list[np.ndarray], ys: np.ndarray, sizes: np.ndarray, rounds: int) -> Any:
    """A booster in MetaSchedule's pack-sum form (a program's score is the sum of its stores'
    scores, so ``XGBModel._predict`` reads it as is) trained on a pairwise logistic loss within
    each group: for records i faster than j, log(1 + exp(-(s_i - s_j))) weighted by the gap of
    their speed ratios, each group's pairs summing to its count of records. MetaSchedule's own loss
    weights a record by its speed, so a program 100x off the best teaches almost nothing, and
    a pool of sampled programs (slow ones among them) gets its slow ones scored at random."""
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum

    pack = PackSum(xs=feats, ys=ys)
    pack.dmatrix.set_weight(np.ones(pack.dmatrix.num_row(), dtype="float32"))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    pairs = []  # per group: (start, end, pair weights W[i, j] > 0 where i is faster than j)
    for a, b in zip(bounds[:-1], bounds[1:]):
        y = ys[a:b].astype("float64")
        w = np.clip(y[:, None] - y[None, :], 0.0, None)
        total = w.sum()
        if total > 0:
            pairs.append((a, b, w * (len(y) / total)))  # a group weighs as many records as it holds

    def objective(row_pred: np.ndarray, _dtrain: Any) -> tuple[np.ndarray, np.ndarray]:
        s = pack.predict_with_score(row_pred)
        grad, hess = np.zeros_like(s), np.zeros_like(s)
        for a, b, w in pairs:
            d = s[a:b, None] - s[None, a:b]  # s_i - s_j
            sig = 1.0 / (1.0 + np.exp(np.clip(d, -50, 50)))  # d loss / d(s_i - s_j) = -sig
            g, h = w * sig, w * sig * (1.0 - sig)
            grad[a:b] += g.sum(0) - g.sum(1)
            hess[a:b] += h.sum(0) + h.sum(1)
        return grad[pack.ids], np.maximum(hess, 1e-6)[pack.ids]

    params = {**params, "disable_default_eval_metric": 1}
    return xgb.train(params, pack.dmatrix, num_boost_round=rounds, obj=objective)


def _corpus_groups(corpus: Any, hardware: Hardware, config: CostModelConfig, summary: FitSummary, *,
                   progress: bool = False) -> Iterable[tuple[str, list[np.ndarray], np.ndarray]]:
    """(group, features, costs) per workload of the key, from replayed stored traces; then the
    same for each key of ``config.also_from``, grouped apart (``WORKLOAD@KEY``), since speeds are
    only comparable within one key's measurements of one workload."""
    from collectors.hardware import hardware_for_key

    rows = {w["workload_key"]: w for w in corpus.workloads()}
    for key in (config.hardware_key, *config.also_from):
        if key == hardware.key:
            target = hardware
        else:
            info = corpus.hardware_info(key)
            if info is None:
                raise ValueError(f"the corpus has no hardware key {key!r} to learn from")
            target = hardware_for_key(key, info)
        before = summary.records
        for wkey, feats, costs in _key_groups(corpus, key, target, rows, config, summary, progress=progress):
            yield (wkey if key == config.hardware_key else f"{wkey}@{key}"), feats, costs
        summary.by_key[key] = summary.records - before


def _key_groups(corpus: Any, key: str, hardware: Hardware, rows: dict, config: CostModelConfig,
                summary: FitSummary, *, progress: bool) -> Iterable[tuple[str, list[np.ndarray], np.ndarray]]:
    """(workload key, features, costs) per workload measured on ``key`` (features for ``hardware``)."""
    from collectors.tasks import task_from_index
    from collectors.tir import schedule_of

    table = corpus.scan({"hardware_key": key}, columns=["workload_key", "trace_json", "latency_s", "error", "tuner"])
    rows_of_key = table.to_pylist()
    if config.tuners:
        rows_of_key = [r for r in rows_of_key if (r["tuner"] or "").startswith(config.tuners)]
    by_workload = _by_workload(rows_of_key)
    keys = sorted(set(by_workload) - set(config.exclude_workloads))
    it: Iterable[str] = keys
    if progress:
        from tqdm import tqdm

        it = tqdm(keys, desc=f"cost model features ({key})", unit="task")

    def skip(reason: str) -> None:
        summary.skipped[reason] = summary.skipped.get(reason, 0) + 1

    for wkey in it:
        if wkey not in rows:
            skip("workload not in the index")
            continue
        try:
            task = task_from_index(rows[wkey])
        except ValueError:
            skip("module not loadable")
            continue
        part = _sample(by_workload[wkey], config)
        schedules, costs = [], []
        for r in part:
            if r["latency_s"] is None and not config.with_errors:
                continue
            try:
                schedules.append(schedule_of(task.mod, r["trace_json"]))
            except Exception:  # noqa: BLE001 - a trace of an older TVM may not replay: skip, count
                skip("trace does not replay")
                continue
            costs.append(r["latency_s"] if r["latency_s"] is not None else FAILED_COST)
            summary.errors += r["latency_s"] is None
        if not schedules or all(c == FAILED_COST for c in costs):
            continue
        feats = features_of(task, hardware, schedules)
        keep = [i for i, f in enumerate(feats) if len(f)]
        summary.workloads += 1
        summary.records += len(keep)
        yield wkey, [feats[i] for i in keep], np.asarray([costs[i] for i in keep], dtype="float32")


def _by_workload(rows: list[dict]) -> dict[str, list[dict]]:
    """Records grouped by workload key, in corpus order."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["workload_key"], []).append(r)
    return out


def _sample(rows: list[dict], config: CostModelConfig) -> list[dict]:
    """All rows, or the fastest half of the budget and an even spread of the rest (deterministic)."""
    n = config.max_records_per_workload
    if not n or len(rows) <= n:
        return rows
    rows = sorted(rows, key=lambda r: (r["latency_s"] is None, r["latency_s"] or 0.0))
    head, rest = rows[: n // 2], rows[n // 2:]
    step = len(rest) / (n - len(head))
    return head + [rest[int(i * step)] for i in range(n - len(head))]
