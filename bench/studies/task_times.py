"""Where a whole model's time goes with the served schedules, task by task, and which tasks
TVM's default lowering would run faster (issue 33: the served build never slower than the
untuned one; what measuring 256 candidates bought, and what it could not).

    .venv/bin/python -m bench.studies.task_times --model mobilenetv2 [--small] [--tlm-model ID|DIR]
        [--out bench/results/task_times.json]

Every task of the model gets the schedule ``tlm compile`` serves without measuring (the key's
model, else the nearest, ranked by its cost model over the weighted pool); its served program
and its default lowering (the PrimFunc unscheduled: what the untuned build runs) are then timed
in **one** measurement call per task (correctness-checked), and scored by the key's cost model
(``cost_model_calls_default``: could it tell where the default is faster, without measuring?). Per task: weight x latency of each,
so the sum says how much of the whole model's time is in kernels and which tasks hold it; the
whole model is built and timed both ways beside it, ``collectors.compile.SIDE_BY_SIDE_RUNS`` times in turn (medians).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from bench._common import RESULTS, machine


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mobilenetv2")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--tlm-model", default=None)
    ap.add_argument("--out", default=os.path.join(RESULTS, "task_times.json"))
    args = ap.parse_args(argv)
    res = study(args.model, small=args.small, tlm_model=args.tlm_model)
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=2)
    print(json.dumps({k: v for k, v in res.items() if k != "tasks"}, indent=2))


def study(model: str, *, small: bool, tlm_model: str | None) -> dict:
    from tvm.s_tir.schedule import Schedule

    from bench._common import refuse_beside_measuring
    from collectors.compile import compile_model, time_side_by_side
    from collectors.failure_modes import modes_of_trace
    from collectors.hardware import detect_hardware
    from collectors.tasks import extract_tasks, import_relax
    from collectors.tir import as_module, schedule_of
    from collectors.tuner import measure_schedules
    from collectors.zoo import build_model
    from tlm.model.network import load_model
    from tlm.service.catalog import ranker_for, resolve_model, serving_model
    from tlm.service.whole_model import database_of, local_source, schedule_tasks, weighted_pools

    refuse_beside_measuring("time a model's tasks")
    hw = detect_hardware("cpu")
    module, example = build_model(model, small=small, seq_len=None if small else 128)
    relax_mod = import_relax(module, example)
    tasks = extract_tasks((module, example), hw, model_name=model, relax_mod=relax_mod)
    entry = resolve_model(tlm_model, None) if tlm_model else serving_model(hw).entry
    net, tok, _ = load_model(entry.path)
    ranker = ranker_for(entry.path, hw.key)[0]
    chosen = schedule_tasks(tasks, hw, local_source(hw, net, tok, entry.model_id, ranker, weighted_pools(tasks)))
    rows: list[dict[str, Any]] = []
    for ts in chosen:
        scheds = [Schedule(as_module(ts.task.mod))] + ([schedule_of(ts.task.mod, ts.trace)] if ts.trace else [])
        scores = [float(x) for x in ranker.predict(ts.task, hw, scheds)] if ranker is not None else []
        records: list = []
        measure_schedules(ts.task, hw, scheds, tuner="study", on_records=records.extend)
        lat = [r.latency_s for r in records]
        rows.append({"task": ts.task.task_name, "op_kind": ts.task.op_kind, "weight": ts.task.weight,
                     "flops": ts.task.flops, "default_us": _us(lat[0]),
                     "served_us": _us(lat[1]) if len(lat) > 1 else None,
                     "source": ts.source, "why_default": ts.error if ts.source == "default" else None,
                     "predicted_default_faster": scores[0] > scores[1] if len(scores) == 2 else None,
                     "modes": list(modes_of_trace(ts.task.mod, ts.trace, hw)) if ts.trace else None,
                     "errors": [r.error for r in records if r.error]})
    served_build = compile_model(relax_mod, hw, database_of(chosen, hw))
    untuned_build = compile_model(relax_mod, hw)
    median, runs, at_least = time_side_by_side({"served_ms": served_build, "untuned_ms": untuned_build}, example, hw)
    whole: dict[str, Any] = {k: v * 1e3 for k, v in median.items()}
    whole |= {"runs": {k: [x * 1e3 for x in v] for k, v in runs.items()},
              "served_over_untuned": whole["served_ms"] / whole["untuned_ms"],
              "at_least": sorted(at_least),  # lower bounds: a run stopped once far slower than the served build's
              "default_tasks": sum(ts.source == "default" for ts in chosen), "tasks": len(chosen)}
    return {"machine": machine(hw), "model": model, "small": small, "model_id": entry.model_id,
            "whole_model": whole, **summary(rows), "tasks": rows}


def _us(s: float | None) -> float | None:
    return None if s is None else s * 1e6


def summary(rows: list[dict]) -> dict:
    """Sums of weight x latency (ms), served and default, the tasks where the default is faster
    (their count and the time the served schedules lose there), and the ten tasks holding the
    most served time with their share."""
    def w(r: dict, key: str) -> float:
        return (r[key] or 0.0) * max(1, r["weight"]) / 1e3

    served = sum(w(r, "served_us") if r["served_us"] else w(r, "default_us") for r in rows)
    default = sum(w(r, "default_us") for r in rows)
    slower = [r for r in rows if r["served_us"] and r["default_us"] and r["served_us"] > r["default_us"]]
    modes: dict[str, float] = {}  # served time in programs of each static failure mode (collectors/failure_modes.py)
    for r in rows:
        for m in r.get("modes") or ["none"]:
            modes[m] = modes.get(m, 0.0) + w(r, "served_us")
    top = sorted(rows, key=lambda r: -w(r, "served_us"))[:10]
    judged = [r for r in rows if r.get("predicted_default_faster") is not None and r["served_us"] and r["default_us"]]
    believed = [r for r in judged if r["predicted_default_faster"]]
    by_kind: dict[str, float] = {}
    for r in rows:
        by_kind[r["op_kind"]] = by_kind.get(r["op_kind"], 0.0) + (w(r, "served_us") or w(r, "default_us"))
    return {
        "sum_served_ms": served, "sum_default_ms": default,
        "default_faster": {"tasks": len(slower), "of": len(rows),
                           "lost_ms": sum(w(r, "served_us") - w(r, "default_us") for r in slower),
                           "names": [r["task"] for r in slower]},
        # would the key's cost model, scoring the default lowering beside the served program, tell
        # the tasks where the default is faster? (right / wrong calls, and the sum if believed)
        "cost_model_calls_default": {
            "right": sum(r["default_us"] < r["served_us"] for r in believed),
            "wrong": sum(r["default_us"] >= r["served_us"] for r in believed),
            "missed": sum(r["default_us"] < r["served_us"] and not r["predicted_default_faster"] for r in judged),
            "sum_if_believed_ms": sum(w(r, "default_us" if r["predicted_default_faster"] else "served_us") for r in judged),
            "sum_served_ms": sum(w(r, "served_us") for r in judged)},
        "served_ms_by_failure_mode": dict(sorted(modes.items(), key=lambda kv: -kv[1])),
        "served_ms_by_op_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "heaviest": [{"task": r["task"], "weight": r["weight"], "served_ms": w(r, "served_us"),
                      "default_ms": w(r, "default_us"), "modes": r.get("modes"), "share": w(r, "served_us") / served if served else None}
                     for r in top],
    }


if __name__ == "__main__":
    main()
