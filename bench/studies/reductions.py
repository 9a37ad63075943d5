"""How should the rules split a reduction over the cores (issue 32, the outside-zoo worst task)?

    .venv/bin/python -m bench.studies.reductions [--out bench/results/reductions-<key>.json]

MetaSchedule's rfactor sketch splits a reduction of length K into ``K / f`` steps of ``f``
partial results (the rfactor'd loop, vectorized: ``f`` lanes) and a second pass that adds them
up. The rules picked ``f`` as they pick an inner reduction factor (the largest divisor up to 8),
which left Whisper's 250-long mask max at 5 lanes, 2.4x slower than a random program; this study
found the rule they use now (``collectors.rules.rfactor_split``: the divisor nearest sqrt(K)).
``reductions-<key>-old-rule.json`` is its first run, with the old rule as ``rules``.

Tasks: every workload of the corpus whose rule program on this key is an rfactor sketch, and the
reductions, softmaxes and norms of the outside-zoo set (``bench.judging.outside_zoo_tasks``). Per
task, in one measurement call (``collectors.judge``: checked, 3 x 3 runs, median): the rules'
program (``rules``), the same program with every other divisor ``f`` of K from 2 up to the
sketch's largest inner factor in every split (``rf_<f>``; a layer norm has two, of one length), the rules' best sketch
without an rfactor (``unsplit``), the key's fastest corpus record and MetaSchedule@256 where
``bench.references`` has it cached.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Any

from bench._common import RESULTS, machine, refuse_beside_measuring


def rfactor_variants(task: Any, hardware: Any) -> dict[str, Any]:
    """``{"rules": sch, "rf_<f>": sch, ...}``: the rules' rfactor program with each inner factor
    ``f`` (postprocessed; refused ones left out), or ``{}`` when the rules pick no rfactor sketch."""
    import math

    from tvm.s_tir.schedule import Schedule

    from collectors.rules import _rfactors, rule_schedule
    from collectors.sketches import design_space, refusing_postproc
    from collectors.tir import as_module

    rule = rule_schedule(task, hardware)
    trace = design_space(as_module(task.mod), hardware)[rule.sketch_index].trace
    if not _rfactors(trace):
        return {}
    split = [i for i, d in rule.decisions.items() if isinstance(d, list) and len(d) == 2]
    extents = {math.prod(rule.decisions[i]) for i in split}
    if not split or len(extents) != 1:  # every split (a layer norm has two) the same length
        return {}
    extent, max_inner = extents.pop(), min(int(trace.insts[i].attrs[1]) for i in split)
    out = {"rules": rule.schedule}
    for f in range(2, min(extent, max_inner) + 1):
        if extent % f or f == rule.decisions[split[0]][1]:
            continue
        sch = Schedule(as_module(task.mod))
        counter = [0]

        def provider(inst: Any, inputs: Any, attrs: Any, decision: Any, f: int = f) -> Any:
            i = counter[0]
            counter[0] += 1
            if i in split:
                return [extent // f, f]
            return rule.decisions.get(i, decision)

        trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
        if refusing_postproc(sch, task, hardware) is None:
            out[f"rf_{f}"] = sch
    return out


def unsplit(task: Any, hardware: Any) -> Any:
    """The rules' program when every rfactor sketch comes last (as for a reduction of two vectors)."""
    import collectors.rules as rules

    longest = rules._longest_reduction
    rules._longest_reduction = lambda t: 0
    try:
        return rules.rule_schedule(task, hardware).schedule
    finally:
        rules._longest_reduction = longest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--max-tasks", type=int, default=0, help="judge only the first N tasks (0: all)")
    args = ap.parse_args()
    refuse_beside_measuring("judge the reductions")
    logging.disable(logging.INFO)

    from bench.judging import CORPUS, outside_zoo_tasks
    from bench.references import known_references
    from collectors.hardware import detect_hardware
    from collectors.judge import Method, judge
    from collectors.rules import _longest_reduction
    from collectors.tasks import task_from_index
    from storage import Corpus

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"reductions-{hw.key.removeprefix('cpu-')}.json")
    res_rows = []
    t0 = time.time()
    with Corpus.open(CORPUS) as corpus:
        tasks = []
        for row in corpus.workloads():
            try:
                tasks.append(task_from_index(row))
            except ValueError:
                continue
        tasks += [t for t in outside_zoo_tasks(hw) if t.op_kind in ("reduction", "softmax", "norm")]
        for t in tasks:
            variants = rfactor_variants(t, hw)
            if not variants:
                continue
            methods = {n: Method([s], 0.0) for n, s in variants.items()}
            methods["unsplit"] = Method([unsplit(t, hw)], 0.0)
            methods |= known_references(t, hw, corpus)
            res = judge(t, hw, methods, torch_eager=False)
            lat = {n: v["latency_s"] for n, v in res.items() if v.get("latency_s")}
            res_rows.append({"task": t.task_name, "model": t.model, "op_kind": t.op_kind,
                             "reduction": _longest_reduction(t), "latency_s": lat})
            print(t.task_name, t.model, _longest_reduction(t),
                  {n: f"{v * 1e6:.1f}" for n, v in sorted(lat.items(), key=lambda kv: kv[1])}, flush=True)
            if args.max_tasks and len(res_rows) >= args.max_tasks:
                break
    res = {"machine": machine(hw), "hardware": hw.key, "wall_s": round(time.time() - t0), "tasks": res_rows}
    with open(out, "w") as fh:
        json.dump(res, fh, indent=2)
    print(f"{len(res_rows)} tasks -> {out}")


if __name__ == "__main__":
    main()
