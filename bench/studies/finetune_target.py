"""Which fine-tuning target teaches a TLM the fast schedules? Three targets, one base, one budget.

    .venv/bin/python -m bench.studies.finetune_target --base models/<pretrained> --all-records DIR \
        --hardware KEY [--steps 150]

``DIR`` is ``tlm dataset build --top-k 100000 --per-sketch 0`` output: every successful
measured record of every task as a sentence with its latency. From its ``train`` split three
fine-tuning sets are made and each fine-tunes the same pretrained base for the same number
of steps (Ray Train, 2 workers):

* ``tlm_top1``: the fastest record per task (the original TLM's selection of training schedules), unweighted;
* ``topk4``: the 4 fastest records per (task, sketch), unweighted;
* ``topk4_latency``: the same rows, each weighted by best latency / its latency (our default).

Judged on the ``test`` split (tasks of held-out models, never trained on), per task with at
least 5 measured records (at most 40: the fastest and an even sample across the latency range): (1) ``regret`` — latency of the record the model finds most likely
(mean log-probability per decision token) over the task's best, geometric mean (1.0 = the
model always prefers the fastest); (2) ``spearman`` — rank correlation between likelihood and
speed, mean over tasks. The base model itself is judged too. JSON to
``bench/results/finetune_target.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections import defaultdict

from bench._common import RESULTS as RESULTS_DIR, geomean, shipped_path

RESULTS = os.path.join(RESULTS_DIR, "finetune_target.json")


def _write(rows: list[dict], out_dir: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tlm.model.dataset import FINETUNE_FILE

    os.makedirs(out_dir, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), os.path.join(out_dir, FINETUNE_FILE))
    return out_dir


def variants(train: list[dict]) -> dict[str, tuple[list[dict], str]]:
    """name -> (rows, loss weighting)."""
    by_task, by_sketch = defaultdict(list), defaultdict(list)
    for r in sorted(train, key=lambda r: r["latency_s"]):
        by_task[r["workload_key"]].append(r)
        by_sketch[(r["workload_key"], r["sketch_id"])].append(r)
    top1 = [rs[0] for rs in by_task.values()]
    top4 = [r for rs in by_sketch.values() for r in rs[:4]]
    return {"tlm_top1": (top1, "none"), "topk4": (top4, "none"), "topk4_latency": (top4, "latency")}


def judge(model_dir: str, test: list[dict], min_records: int = 5, max_records: int = 40) -> dict:
    """Regret and rank correlation of the model's likelihood on each held-out task's records
    (at most ``max_records`` per task: the fastest and an evenly spaced sample by latency)."""
    import numpy as np

    from collectors.cost_model import spearman
    from tlm.model.network import load_model
    from tlm.model.scoring import decision_logprobs

    model, tok, _ = load_model(model_dir)
    groups = defaultdict(list)
    for r in test:
        groups[r["workload_key"]].append(r)
    for key, rows in groups.items():
        rows.sort(key=lambda r: (r["latency_s"], r["record_id"] or ""))
        if len(rows) > max_records:
            step = (len(rows) - 1) / (max_records - 1)
            groups[key] = [rows[round(i * step)] for i in range(max_records)]
    regrets, rhos = [], []
    for rows in groups.values():
        if len(rows) < min_records:
            continue
        lp = decision_logprobs(model, tok, [r["text"] for r in rows], [r["prompt_len"] for r in rows])
        score = [s / max(n, 1) for s, n in lp]
        best = min(r["latency_s"] for r in rows)
        chosen = max(range(len(rows)), key=lambda i: score[i])
        regrets.append(rows[chosen]["latency_s"] / best)
        rhos.append(spearman(np.asarray(score), np.asarray([-r["latency_s"] for r in rows])))
    return {"tasks": len(regrets),
            "regret_geomean": geomean(regrets),
            "spearman_mean": sum(rhos) / len(rhos) if rhos else None}


def main() -> None:
    import pyarrow.parquet as pq

    from cluster.train_job import TrainJob, run_training
    from tlm.model.dataset import FINETUNE_FILE
    from tlm.model.train import TrainConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="pretrained model directory")
    ap.add_argument("--all-records", required=True, help="dataset dir built with a huge --top-k")
    ap.add_argument("--hardware", required=True)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    os.environ.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    rows = [r for r in pq.read_table(os.path.join(args.all_records, FINETUNE_FILE)).to_pylist()
            if r["hardware_key"] == args.hardware]
    train = [r for r in rows if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]
    res = {"base": shipped_path(args.base), "hardware": args.hardware, "steps": args.steps,
           "train_records": len(train), "test_records": len(test), "variants": {}}
    res["variants"]["base (no fine-tuning)"] = judge(args.base, test)
    print("base", res["variants"]["base (no fine-tuning)"], flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ft-") as tmp:
        for name, (vrows, weighting) in variants(train).items():
            data = _write(vrows + [dict(r, split="test") for r in test[:64]], os.path.join(tmp, name))
            cfg = TrainConfig(stage="finetune", max_steps=args.steps, batch_size=8, lr=3e-4, warmup_steps=5,
                              loss_weighting=weighting, eval_every=args.steps, log_every=50)
            job = TrainJob(dataset_dir=data, out_dir=os.path.join(tmp, "models"), name=name, workers=args.workers,
                           hardware_key=args.hardware, base_path=os.path.abspath(args.base))
            result = run_training(cfg, job)
            res["variants"][name] = {"rows": len(vrows), "weighting": weighting, **judge(result.path, test),
                                     "eval_loss": result.metrics.get("eval_loss")}
            print(name, res["variants"][name], flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
