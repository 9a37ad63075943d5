"""Markdown summary of a corpus for its README: records per model and tuner, hardware keys,
errors, and the best latency per task.

    .venv/bin/python scripts/corpus_summary.py [CORPUS_DIR]      (default data/corpus)

A workload that occurs in several models counts for each of them in the per-model table (the
totals line counts each record once).
"""
from __future__ import annotations

import collections
import sys


def main(root: str = "data/corpus") -> int:
    import pyarrow.compute as pc

    from storage import Corpus

    with Corpus.open(root) as c:
        table = c.scan(columns=["workload_key", "hardware_key", "tuner", "latency_s", "error", "created_at"])
        workloads = {w["workload_key"]: w for w in c.workloads()}
        runs = c.run_summaries()
    rows = table.to_pylist()
    per: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    best: dict[tuple[str, str], float] = {}
    for r in rows:
        models = workloads.get(r["workload_key"], {}).get("models") or {"?": 1}
        for m in models:
            per[(r["hardware_key"], m, r["tuner"])][0 if r["error"] is None else 1] += 1
        if r["latency_s"] is not None:
            k = (r["workload_key"], r["hardware_key"])
            best[k] = min(best.get(k, float("inf")), r["latency_s"])
    print(f"{table.num_rows} records ({int(pc.sum(pc.is_valid(table['latency_s'])).as_py() or 0)} measured, "
          f"{int(pc.sum(pc.is_valid(table['error'])).as_py() or 0)} errors) of {len({r['workload_key'] for r in rows})} "
          f"workloads; hardware keys: {', '.join(sorted(set(table['hardware_key'].to_pylist())))}; "
          f"collected {min(table['created_at'].to_pylist())} .. {max(table['created_at'].to_pylist())}\n")
    print("| hardware | model | tuner | measured | errors |\n|---|---|---|---:|---:|")
    for (h, m, t), (ok, err) in sorted(per.items()):
        print(f"| {h} | {m} | {t} | {ok} | {err} |")
    print("\n| run | hardware | status | tasks done | tasks failed | records | seconds |"
          "\n|---|---|---|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['run_id'][:8]} | {','.join(r['hardware'] or []) if isinstance(r['hardware'], list) else r['hardware']} | "
              f"{r['status']} | {r['tasks_done']} | {r['tasks_failed']} | {r['records']} | {r['seconds']} |")
    eager = _torch_eager()
    print("\n| task | models | MFLOP | hardware | best latency (us) | GFLOP/s | PyTorch eager (us) | eager / best |"
          "\n|---|---|---:|---|---:|---:|---:|---:|")
    for (wk, hw), lat in sorted(best.items(), key=lambda kv: -(workloads.get(kv[0][0], {}).get("flops") or 0)):
        w = workloads.get(wk, {})
        flops = w.get("flops") or 0.0
        e = eager.get((wk, hw))
        cols = f"{e * 1e6:.1f} | {e / lat:.2f}" if e else "- | -"
        print(f"| {w.get('task_name')} | {','.join(sorted(w.get('models') or {}))} | {flops / 1e6:.1f} | {hw} | "
              f"{lat * 1e6:.1f} | {flops / lat / 1e9:.1f} | {cols} |")
    return 0


def _torch_eager(path: str = "bench/results/torch_ops.json") -> dict:
    """(workload, hardware) -> PyTorch eager seconds, from ``python -m bench.torch_ops`` (if run)."""
    import json
    import os

    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rows = json.load(f)["tasks"]
    return {(r["workload_key"], r["hardware_key"]): r["torch_eager_s"] for r in rows if r.get("torch_eager_s")}


if __name__ == "__main__":
    import argparse
    import os

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", metavar="CORPUS", nargs="?", default="data/corpus", help="a corpus directory")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.corpus, "index.sqlite")):  # opening one creates it
        ap.error(f"no corpus at {args.corpus!r} (a directory holding index.sqlite and the Parquet parts)")
    sys.exit(main(args.corpus))
