"""Rewriting a layout-free input for measurement: our vectorised scatter against TVM's
``IndexMap.map_tensor``, side by side (issue 33, item 5; target <= 0.1 s for 1M elements).

    .venv/bin/python -m bench.layout_rewrite [--rows 2048] [--cols 512] [--repeats 3]

The input is the weight of TOPI's ``relu(dense(x, w))`` (``w``: rows x cols, layout-free) as the
rule baseline's schedule rewrites it (``collectors.rules``; MetaSchedule's ``RewriteLayout``);
both paths must give the same array. Writes ``bench/results/layout_rewrite.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from bench._common import RESULTS, machine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(RESULTS, "layout_rewrite.json"))
    args = ap.parse_args()

    import numpy as np
    import tvm
    from tvm import te, topi

    from collectors.hardware import detect_hardware
    from collectors.layout import layout_rewrites
    from collectors.rules import rule_schedule
    from collectors.tasks import Task
    from collectors.tir import workload_key

    hw = detect_hardware("cpu")
    x, w = te.placeholder((8, args.cols), name="x"), te.placeholder((args.rows, args.cols), name="w")
    mod = tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.relu(topi.nn.dense(x, w))])})
    (rewrite,) = layout_rewrites(rule_schedule(Task(workload_key(mod), "dense", mod, op_kind="matmul"), hw).schedule.mod)
    weight = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype("float32")
    index_map = tvm.ir.load_json(rewrite.index_map_json)
    ours, tvms = [], []
    for _ in range(args.repeats):  # alternated, so a noisy moment hits both
        t0 = time.perf_counter()
        a = rewrite.apply(weight)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        b = index_map.map_tensor(tvm.runtime.tensor(weight)).numpy()
        tvms.append(time.perf_counter() - t0)
        assert np.array_equal(a, b), "the two rewrites differ"
    res = {"machine": machine(hw), "elements": weight.size, "index_map": rewrite.index_map,
           "ours_s": min(ours), "tvm_map_tensor_s": min(tvms), "speedup": min(tvms) / min(ours),
           "target_s": 0.1, "met": min(ours) <= 0.1}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
