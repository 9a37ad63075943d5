"""Which ranking of a measured pool picks the best top-1: judged without measuring again.

    .venv/bin/python -m bench.studies.rankers --pools POOLS.json --cost-model DIR [--also DIR ...]
        [--objective pairwise|mlp ...] [--pool served]

``bench/studies/pools.py`` measures every program of the model's pools on the held-out tasks (each
against MetaSchedule@256's schedule in the same call) and keeps them all in its JSON
(``candidates``). This replays each program from its sentence, computes its features once, and
scores it with every ranking asked for: the likelihood, the cost model of ``--cost-model``, and
that cost model's own training data (the feature groups its ``cost_model.tar`` stores) refitted
with each ``--objective`` (``collectors.cost_model.OBJECTIVES``: ``metaschedule`` and ``pairwise``
boosters, or ``mlp``, MetaSchedule's own SegmentSumMLP with its LambdaRank loss on the same
features, ``--epochs`` of it), and every cost model of ``--also`` as it is; on a ``served`` pool also
the rules' program (what serving the rule baseline alone would give). Per ranking: the speed of its
top-1 and of the best of its top-4 / top-10 relative to MS@256 (geomean over tasks), beside the
fastest program of the pool (a perfect ranker). It is how a cost model objective is chosen
before a ``bench/quality.py`` run confirms it. Writes JSON (``--out``). Nothing is run: the
programs are replayed and their features computed for the target of the key the pools were
measured on (the corpus's row of it), so any host can judge any key's pools.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from bench._common import RESULTS, geomean
from bench.judging import CORPUS, judging_set



@dataclass
class MeasuredPool:
    """One task's pool from a ``bench/studies/pools.py`` JSON, replayed: each program's record (sentence,
    latency, likelihood score), its features and its speed relative to MS@256 (0: failed)."""

    model: str  # the generating model's name in the JSON
    task: Any
    candidates: list[dict]
    features: list[np.ndarray]
    speeds: np.ndarray


def measured_pools(path: str, pool: str, hw: Any, corpus_dir: str | None = None) -> Iterator[MeasuredPool]:
    """Every task of the pools JSON at ``path`` (measured on ``hw``'s key, else SystemExit),
    only the programs of the pool named ``pool``, each replayed from its sentence."""
    from collectors.cost_model import features_of
    from tlm.language import apply_sentence

    with open(path) as f:
        dump = json.load(f)
    if dump["hardware"] != hw.key:
        raise SystemExit(f"{path} was measured on {dump['hardware']}, this host is {hw.key}")
    tasks = {(t.task_name, t.model): t for t in judging_set(hw, corpus_dir=corpus_dir)}
    for name, entry in dump["models"].items():
        for tr in entry["tasks"]:
            task = tasks[(tr["task"], tr["model"])]
            cands = [c for c in tr["candidates"] if pool in c["pools"]]
            feats = features_of(task, hw, [apply_sentence(c["text"].split(), task, hw).schedule for c in cands])
            ref = tr["ms_256_s"]
            speeds = np.asarray([ref / c["latency_s"] if c["latency_s"] else 0.0 for c in cands])
            yield MeasuredPool(name, task, cands, feats, speeds)


def pools_hardware(path: str, corpus_dir: str) -> Any:
    """The hardware the pools JSON at ``path`` was measured on, from the corpus's row of its key:
    features depend on the target (vector width, cores), not on the host computing them."""
    from collectors.hardware import hardware_for_key
    from storage import Corpus

    with open(path) as f:
        key = json.load(f)["hardware"]
    with Corpus.open(corpus_dir) as corpus:
        return hardware_for_key(key, corpus.hardware_info(key))


def picks(scores: np.ndarray, speeds: np.ndarray, ks: tuple[int, ...] = (1, 4, 10)) -> dict[str, float]:
    """Speed of the best of the top-k programs by ``scores`` (higher first; a failed program's
    speed is 0), for each k; ties are broken by pool order."""
    order = np.argsort(-scores, kind="stable")
    return {f"top{k}": float(speeds[order[:k]].max()) for k in ks}


def summarise(rows: list[dict]) -> dict:
    """Per ranking, the geomean over tasks of each top-k pick's speed (a failed pick counts as
    1/1000) and, where the rows have it, the mean Spearman; beside the pools' fastest."""
    summary = {}
    for label in rows[0]["rankers"]:
        summary[label] = {k: geomean([max(r["rankers"][label][k], 1e-3) for r in rows]) for k in ("top1", "top4", "top10")}
        if "spearman" in rows[0]:
            summary[label]["spearman"] = float(np.mean([r["spearman"][label] for r in rows]))
    summary["fastest"] = {"top1": geomean([r["fastest"] for r in rows])}
    return summary


def write(head: dict, rows: list[dict], out: str) -> None:
    """``head``, the summary and the per-task rows as JSON at ``out``; the summary printed."""
    summary = summarise(rows)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({**head, "reference": "ms_256", "summary": summary, "tasks": rows}, f, indent=2)
    print(json.dumps(summary, indent=1))


#: How much faster than the rules' program (the cost model's predicted score, as a ratio) another
#: program of a served pool must be predicted before it is served instead (``overruled``).
OVERRULE_MARGINS = (0.0, 0.1, 0.3, 1.0)


def overruled(cost: np.ndarray, is_rules: np.ndarray, margin: float) -> np.ndarray:
    """Scores that serve the rules' program first unless the cost model predicts another program
    more than ``1 + margin`` times its score (then the cost model's order): how far a served pick
    may trust the cost model over the rules (``tlm.service.generator.RULES_FIRST`` trusts it never)."""
    out = cost.astype(float).copy()
    if is_rules.any() and (~is_rules).any() and out[~is_rules].max() <= out[is_rules].max() * (1 + margin):
        out[is_rules] = np.inf
    return out


def _z(x: np.ndarray) -> np.ndarray:
    """Standardised within the pool (0 where every score is the same)."""
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pools", required=True, help="a bench/studies/pools.py JSON with candidates")
    ap.add_argument("--pool", default="samples_32", help="which pool of it to rank (default samples_32)")
    ap.add_argument("--cost-model", required=True, help="the cost model directory the pools were scored with")
    ap.add_argument("--also", action="append", default=[], metavar="DIR",
                    help="another cost model directory to rank with, side by side (repeatable; labelled by its name)")
    ap.add_argument("--objective", action="append", default=[], help="refit its feature groups with this objective")
    ap.add_argument("--rounds", type=int, default=300, help="boosting rounds of a refitted objective")
    ap.add_argument("--epochs", type=int, default=50, help="training epochs of a refitted mlp objective")
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--out", default=os.path.join(RESULTS, "rankers.json"))
    args = ap.parse_args()

    import collectors.fast_import as fast_import
    from collectors.cost_model import CostModel

    fast_import.install()
    hw = pools_hardware(args.pools, args.corpus)
    base = CostModel.load(args.cost_model)
    models: dict[str, Any] = {"cost_model": base}
    models.update({os.path.basename(os.path.normpath(d)): CostModel.load(d) for d in args.also})
    for obj in args.objective:
        t0 = time.time()
        models[obj] = base.refit(objective=obj, rounds=args.rounds, epochs=args.epochs)
        print(f"refit {obj}: {time.time() - t0:.0f} s", flush=True)
    rows = []
    for p in measured_pools(args.pools, args.pool, hw, args.corpus):
        scores = {"likelihood": np.asarray([c["score"] for c in p.candidates])}
        for label, cm in models.items():
            scores[label] = cm.score(p.features)
            # the cost model's and the model's own opinion together, each as a z-score in the pool
            scores[f"{label}+likelihood"] = _z(scores[label]) + _z(scores["likelihood"])
        if "origin" in p.candidates[0]:  # a served pool: the rules' program, else the cost model's pick
            rules = np.asarray([float(c["origin"] == "rules") for c in p.candidates])
            scores["rules"] = rules * 1e6 + scores["cost_model"]
            for m in OVERRULE_MARGINS:
                scores[f"rules unless +{m:g}"] = overruled(scores["cost_model"], rules.astype(bool), m)
        row = {"model": p.model, "task": p.task.task_name, "size": len(p.candidates), "fastest": float(p.speeds.max()),
               "rankers": {label: picks(s, p.speeds) for label, s in scores.items()}}
        rows.append(row)
        print(row["task"], {k: round(v["top1"], 2) for k, v in row["rankers"].items()}, flush=True)
    write({"hardware": hw.key, "pools": args.pools, "pool": args.pool, "cost_model": args.cost_model,
           "also": args.also}, rows, args.out)


if __name__ == "__main__":
    main()
