"""How far should the rules unroll? Their programs take ``max_step`` 64 wherever a sketch samples
an auto-unroll step (``collectors.rules.UNROLL_STEP``, MetaSchedule's middle choice); an
exploration on a Rocket Lake (one call per task) read 512 as 1.3-2.1x on some convolutions and
0.3-0.6x on others with the same micro-kernel shape, which one call per task cannot tell from this
host's call-to-call noise (up to 20%). This study measures each step twice.

    .venv/bin/python -m bench.studies.unroll [--steps 16,64,512] [--tasks N] [--out bench/results/unroll-<key>.json]

Tasks: the CNN zoo models' convolutions (full size, as the corpus collects them; MobileNetV2's
and EfficientNet-B0's also as ``tlm compile`` folds them) and the judging set's tasks, each once. Per task, two
measurement calls (``collectors.judge``: checked, 3 x 3 runs, median), the variants in reverse
order the second time: the rules at each step (``u<step>``), the key's fastest corpus record and
MetaSchedule@256 where ``bench.references`` has them. A step *wins* (or *loses*) on a task when
both calls put it 10% ahead of (or behind) the rules' own step; anything else is a tie. Beside each
task: its micro-kernel as the rules wrote it (the innermost spatial tiles' product over the
vector, the inner reduction's extent, the steps of one micro-kernel call), from which a rule for
the step could be read.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

from bench._common import RESULTS, geomean, refuse_beside_measuring

#: How far ahead (or behind) both calls must put a step for a win (or a loss).
CLEAR = 1.10


def unroll_tasks(hw: Any, limit: int | None = None) -> list:
    """The zoo's convolutions (the corpus's graphs, and as `tlm compile` folds them) and the judging set."""
    from bench.judging import cnn_tasks, judging_set

    tasks = cnn_tasks(hw, lambda t: "conv" in t.task_name) + judging_set(hw)
    seen: dict[str, Any] = {}
    for t in tasks:
        seen.setdefault(t.workload_key, t)
    return list(seen.values())[:limit]


def micro_kernel(decisions: dict) -> dict:
    """The rules' micro-kernel, from their decisions (``RuleSchedule.decisions``): ``inner`` (the
    innermost spatial tiles' product, in vectors of ``vector`` lanes), ``reduce`` (the inner
    reduction factors' product) and ``steps`` (the unrollable body: inner x reduce)."""
    tiles = [v for v in decisions.values() if isinstance(v, list)]
    spatial, reduce = [v for v in tiles if len(v) == 4], [v for v in tiles if len(v) == 2]
    vector = spatial[-1][3] if spatial else 1
    inner = math.prod(v[3] for v in spatial) // max(1, vector)
    red = math.prod(v[1] for v in reduce)
    return {"vector": vector, "inner": inner, "reduce": red, "steps": inner * red}


def verdicts(rows: list[dict], steps: list[int], base: int) -> dict:
    """Per step other than ``base``: the geomean speed over ``base`` (both calls' medians), and
    the tasks it wins, loses and ties (:data:`CLEAR` in both calls)."""
    out = {}
    for s in steps:
        if s == base:
            continue
        speeds, won, lost = [], [], []
        for r in rows:
            calls = [c for c in r["calls"] if f"u{s}" in c and f"u{base}" in c]
            if len(calls) < 2:
                continue
            ratios = [c[f"u{base}"] / c[f"u{s}"] for c in calls]
            speeds.append(math.sqrt(ratios[0] * ratios[1]))
            if all(q >= CLEAR for q in ratios):
                won.append(r["task_id"])
            elif all(q <= 1 / CLEAR for q in ratios):
                lost.append(r["task_id"])
        out[f"u{s}"] = {"speed_over_rules": geomean(speeds) if speeds else None, "tasks": len(speeds),
                        "wins": won, "losses": lost, "ties": len(speeds) - len(won) - len(lost)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="16,64,512", help="auto-unroll steps (of MetaSchedule's CPU choices 0, 16, "
                                                          "64, 512)")
    ap.add_argument("--tasks", type=int, default=None, help="the first N tasks only")
    ap.add_argument("--out", default=None, help="default bench/results/unroll-<key>.json")
    args = ap.parse_args()
    steps = sorted({int(s) for s in args.steps.split(",") if s})
    if not set(steps) <= {0, 16, 64, 512}:
        raise SystemExit(f"error: --steps {args.steps!r}: MetaSchedule's CPU sketches sample 0, 16, 64 or 512")
    refuse_beside_measuring("judge the rules' unroll steps")

    from bench._common import machine, write_noted
    from bench.studies.rule_variants import judge_variants
    from collectors.hardware import detect_hardware
    from collectors.rules import UNROLL_STEP, rule_schedule

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"unroll-{hw.key.removeprefix('cpu-')}.json")
    tasks = unroll_tasks(hw, args.tasks)
    print(f"{len(tasks)} tasks on {hw.key}, steps {steps}, two calls each", flush=True)
    t0 = time.time()
    rows = []
    for t in tasks:
        made = {s: rule_schedule(t, hw, unroll=s) for s in steps}  # once, for both calls
        variants = {f"u{s}": (lambda t, s=s: made[s].schedule) for s in steps}
        calls = [judge_variants([t], hw, dict(order))[0]["latency_s"]
                 for order in (list(variants.items()), list(variants.items())[::-1])]
        rows.append({"task": t.task_name, "model": t.model, "task_id": f"{t.model}/{t.task_name}",
                     "workload_key": t.workload_key, "flops": t.flops, "calls": calls,
                     "micro_kernel": micro_kernel((made.get(UNROLL_STEP) or rule_schedule(t, hw)).decisions)})
        write_noted({"machine": machine(hw), "hardware": hw.key, "steps": steps, "rules_step": UNROLL_STEP,
                     "wall_s": round(time.time() - t0), "tasks": rows,
                     "summary": {"tasks": len(rows), **verdicts(rows, steps, UNROLL_STEP)}}, out, report_md, None)


def report_md(res: dict) -> str:
    s, base = res["summary"], res["rules_step"]
    lines = [f"# The rules' auto-unroll step on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} tasks, each measured in two calls; the rules take {base}. A win or a loss: both calls "
             f"{CLEAR:.2f}x apart or more. Written by `python -m bench.studies.unroll`.", "",
             "| step | geomean speed over the rules' | wins | losses | ties |", "|---:|---:|---:|---:|---:|"]
    for name, v in s.items():
        if isinstance(v, dict):
            sp = "-" if v["speed_over_rules"] is None else f"{v['speed_over_rules']:.3f}x"
            lines.append(f"| {name[1:]} | {sp} | {len(v['wins'])} | {len(v['losses'])} | {v['ties']} |")
    lines += ["", "| task | micro-kernel (inner x reduce = steps, vector) | "
              + " | ".join(f"u{x} us (two calls)" for x in res["steps"]) + " |",
              "|---|---|" + "---:|" * len(res["steps"])]
    for r in res["tasks"]:
        k = r["micro_kernel"]
        cells = [" / ".join(f"{c[f'u{x}'] * 1e6:.1f}" if f"u{x}" in c else "-" for c in r["calls"]) for x in res["steps"]]
        lines.append(f"| {r['task_id']} | {k['inner']} x {k['reduce']} = {k['steps']}, {k['vector']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
