"""The corpus's best schedule per task against PyTorch eager on the same operator.

    .venv/bin/python -m bench.torch_ops [--corpus data/corpus] [--op-kinds matmul,conv2d]

For every workload of the given op kinds on a hardware key this machine can run: rebuild the
task from the index, compute its reference output (the unscheduled PrimFunc on random inputs),
find the PyTorch call that reproduces that output (a candidate is accepted only if it matches
to the correctness check's tolerance: the mapping is verified, not guessed from the name),
and time it eagerly with the key's core count as threads (median of 30 after 5 warm-up
calls). The corpus latency is MetaSchedule's evaluator's (what every record holds), so the
ratio compares two timings of the same operator on the same machine, taken in different
processes. Tasks without a verified PyTorch equivalent are listed with the reason.

JSON to ``bench/results/torch_ops.json``; ``scripts/corpus_summary.py`` adds it to the README table.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time

from bench._common import geomean, machine, shipped_path

RESULTS = os.path.join(os.path.dirname(__file__), "results", "torch_ops.json")
log = logging.getLogger("bench.torch_ops")


def main() -> None:
    import torch

    from collectors.compile import time_torch
    from collectors.correctness import make_reference
    from collectors.hardware import NotRunnableHere, check_runs_here, hardware_for_key
    from collectors.judge import torch_equivalent
    from collectors.tasks import task_from_index
    from storage import Corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--op-kinds", default="matmul,conv2d")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kinds = set(args.op_kinds.split(","))
    rows, t0 = [], time.time()
    with Corpus.open(args.corpus) as c:
        workloads = [w for w in c.workloads() if w.get("op_kind") in kinds]
        for key in sorted(c.stats()["by_hardware"]):
            hw = hardware_for_key(key, c.hardware_info(key))
            try:
                check_runs_here(hw)
            except NotRunnableHere as exc:
                log.info("skipping %s: %s", key, exc)
                continue
            by_workload: dict[str, list[float]] = {}
            for r in c.scan({"hardware_key": key}, columns=["workload_key", "latency_s"]).to_pylist():
                if r["latency_s"] is not None:
                    by_workload.setdefault(r["workload_key"], []).append(r["latency_s"])
            for w in workloads:
                lats = by_workload.get(w["workload_key"], [])
                if not lats:
                    continue
                task = task_from_index(w)
                ref = make_reference(task.mod)
                fn, desc = torch_equivalent(task.op_kind, ref)
                row = {"task": task.task_name, "workload_key": w["workload_key"], "op_kind": task.op_kind,
                       "models": sorted(w.get("models") or {}), "hardware_key": key, "flops": w.get("flops"),
                       "best_latency_s": min(lats), "records": len(lats), "torch": desc}
                if fn is not None:
                    ins = [torch.from_numpy(a.copy()) for a in ref.inputs[:-1]]
                    eager = time_torch(fn, ins, threads=int(hw.target.get("num-cores", hw.cores)))
                    row |= {"torch_eager_s": eager, "eager_over_best": eager / min(lats)}
                log.info("%s %s: best %.1f us, %s", key, task.task_name, min(lats) * 1e6,
                         f"eager {row['torch_eager_s'] * 1e6:.1f} us ({desc})" if fn else desc)
                rows.append(row)
    ratios = [r["eager_over_best"] for r in rows if "eager_over_best" in r]
    res = {"machine": machine(),
           "corpus": shipped_path(args.corpus), "op_kinds": sorted(kinds), "wall_s": round(time.time() - t0, 1),
           "tasks": rows, "mapped": len(ratios), "unmapped": len(rows) - len(ratios),
           "geomean_eager_over_best": geomean(ratios)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"{len(ratios)} of {len(rows)} tasks mapped to PyTorch; geomean eager/best = {res['geomean_eager_over_best']}")


if __name__ == "__main__":
    main()
