"""A pointwise convolution's whole output plane as one vector run (``collectors.blocking.plane_plan``)
against the rules' program without it (their micro-kernel over one image row), on every zoo
and judging-set task it changes.

    .venv/bin/python -m bench.studies.plane [--calls 2] [--out bench/results/plane-<key>.json]

Tasks: the CNN zoo models' tasks (full size, as the corpus collects them; MobileNetV2 and
EfficientNet-B0 also as ``tlm compile`` folds them) and the judging set, each whose rule program
changes with ``planes`` (on a host whose vectors a 7-wide row fills, none: the study says so).
Per task, ``--calls`` measurement calls (``collectors.judge``: checked, 3 x 3 runs, median):
``rules_plane`` (the rules now), ``rules_rows`` (``planes=False``: before), the key's fastest
corpus record and MetaSchedule@256 where ``bench.references`` has it cached. A task's speed is
the geomean over its calls.
"""
from __future__ import annotations

import argparse
import math
import os
import time

from bench._common import RESULTS, refuse_beside_measuring, speed_over


def plane_tasks(hw) -> list:
    """The zoo's and the judging set's tasks whose rule program changes with ``planes``."""
    from bench.studies.unroll import unroll_tasks
    from collectors.rules import rule_schedule

    def changes(task) -> bool:
        try:
            return rule_schedule(task, hw).decisions != rule_schedule(task, hw, planes=False).decisions
        except ValueError:
            return False

    return [t for t in unroll_tasks(hw) if "conv" in t.task_name and changes(t)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2, help="measurement calls per task (default 2)")
    ap.add_argument("--out", default=None, help="default bench/results/plane-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("judge the rules' plane plan")

    from bench.studies.rule_variants import judge_variants, write_study
    from collectors.hardware import detect_hardware
    from collectors.rules import rule_schedule

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"plane-{hw.key.removeprefix('cpu-')}.json")
    tasks = plane_tasks(hw)
    print(f"{len(tasks)} tasks take the plane plan on {hw.key}", flush=True)
    t0 = time.time()
    variants = {"rules_plane": lambda t: rule_schedule(t, hw).schedule,
                "rules_rows": lambda t: rule_schedule(t, hw, planes=False).schedule}
    calls = [judge_variants(tasks, hw, variants) for _ in range(max(1, args.calls))]
    rows = []
    for per_call in zip(*calls):
        names = set.intersection(*(set(r["latency_s"]) for r in per_call))
        rows.append({**per_call[0], "latency_s": {n: math.exp(sum(math.log(r["latency_s"][n]) for r in per_call)
                                                              / len(per_call)) for n in names},
                     "calls": [r["latency_s"] for r in per_call]})
    per_task = [r["latency_s"]["rules_rows"] / r["latency_s"]["rules_plane"] for r in rows
                if {"rules_rows", "rules_plane"} <= set(r["latency_s"])]
    write_study(out, hw, t0, rows, {
        "calls": len(calls),
        "plane_over_rows": speed_over(rows, "rules_plane", "rules_rows"),
        "plane_over_rows_range": [min(per_task), max(per_task)] if per_task else None,
        "plane_over_corpus_best": speed_over(rows, "rules_plane", "corpus_best"),
        "rows_over_corpus_best": speed_over(rows, "rules_rows", "corpus_best"),
        "plane_over_ms_256": speed_over(rows, "rules_plane", "ms_256"),
        "rows_over_ms_256": speed_over(rows, "rules_rows", "ms_256")}, report_md)


def report_md(res: dict) -> str:
    from bench.studies.rule_variants import latency_table

    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lo, hi = s["plane_over_rows_range"] or (None, None)
    lines = [f"# The rules' plane plan for pointwise convolutions on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} tasks take it. Speed of the plane plan over the rules without it (geomean of "
             f"{s['calls']} calls per task): {f(s['plane_over_rows'])} (per task {f(lo)} to {f(hi)}); over the corpus's "
             f"best record {f(s['plane_over_corpus_best'])} (without it {f(s['rows_over_corpus_best'])}; "
             f"{s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 {f(s['plane_over_ms_256'])} (without it "
             f"{f(s['rows_over_ms_256'])}; {s['tasks_with_ms_256']} tasks). Written by "
             f"`python -m bench.studies.plane`.", "",
             ] + latency_table(res["tasks"], {"rules_plane": "plane, us", "rules_rows": "rows", "corpus_best": "corpus best",
                                             "ms_256": "MS@256"})
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
