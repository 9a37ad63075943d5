"""The CUDA path's figures, from the corpus ``scripts/gpu_path.sh`` collects on a lent GPU machine.

    python -m bench.gpu CORPUS_DIR KEY [--out bench/results/gpu.json]

Per workload of a held-out model measured on ``KEY`` by both the TLM's closed loop (``tlm:<model>``:
the fine-tuned model's k candidates, each built, run and checked on the GPU) and MetaSchedule's
evolutionary search: each one's best latency and number of measurements (the budgets are equal when
the script gives both the same ``--trials``), and the TLM's speed relative to the search (above 1:
faster). Only the summary runs here; the measurements are the GPU's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from bench._common import geomean


def summary(corpus: Any, key: str, held_out: tuple[str, ...]) -> dict:
    """Per held-out workload on ``key``: best latency and measurements of the TLM and of the search."""
    wl = {w["workload_key"]: w for w in corpus.workloads() if set(w["models"]) & set(held_out)}
    rows = corpus.scan({"hardware_key": key}, columns=["workload_key", "tuner", "latency_s"]).to_pylist()
    per: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["workload_key"] not in wl:
            continue
        kind = "tlm" if (r["tuner"] or "").startswith("tlm:") else r["tuner"]
        s = per.setdefault(r["workload_key"], {}).setdefault(kind, {"best_s": None, "measured": 0, "errors": 0})
        if r["latency_s"] is None:
            s["errors"] += 1
            continue
        s["measured"] += 1
        s["best_s"] = r["latency_s"] if s["best_s"] is None else min(s["best_s"], r["latency_s"])
    tasks = []
    for wk, kinds in sorted(per.items()):
        tlm, ms = kinds.get("tlm", {}).get("best_s"), kinds.get("evolutionary", {}).get("best_s")
        tasks.append({"workload_key": wk, "task": wl[wk]["task_name"], **kinds,
                      "tlm_vs_search": ms / tlm if tlm and ms else None})
    return {"hardware": key, "held_out_models": list(held_out), "tasks": tasks,
            "tlm_vs_search_geomean": geomean(t["tlm_vs_search"] for t in tasks)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus")
    ap.add_argument("key")
    ap.add_argument("--out", default=None, help="write the JSON here too")
    args = ap.parse_args(argv)
    from collectors.zoo import HELD_OUT_MODELS
    from storage import Corpus

    if not os.path.isdir(args.corpus):
        print(f"error: no corpus at {args.corpus!r}", file=sys.stderr)
        return 2
    with Corpus.open(args.corpus) as c:
        res = summary(c, args.key, HELD_OUT_MODELS)
    text = json.dumps(res, indent=2)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
