"""A convolution that takes no panel plan: the deep plan (S2 = 1, the inner reduction as deep as
the L1 rule allows: ``collectors.blocking.blocked_plan``) against the sweep it replaced and the
panel plan, on every zoo task it changes.

    .venv/bin/python -m bench.studies.deep_convolution [--out bench/results/deep_convolution-<key>.json]

Tasks: the CNN zoo models' tasks (full size, as the corpus collects them; MobileNetV2 and
EfficientNet-B0 also as ``tlm compile`` folds them) and the judging set's convolutions whose rule
program is neither the forced sweep's nor the forced panel's (the window plan's tasks excluded).
Per task, in one measurement call (``collectors.judge``: checked, 3 x 3 runs, median):
``rules_auto`` (the deep plan), ``rules_sweep`` (what the rules wrote before), ``rules_panel``,
the key's fastest corpus record and MetaSchedule@256 where ``bench.references`` has it cached.
"""
from __future__ import annotations

import argparse
import os
import time

from bench._common import RESULTS, refuse_beside_measuring, speed_over

PLANS = ("auto", "sweep", "panel")


def deep_tasks(hw) -> list:
    """The zoo's convolutions whose rule program is the deep plan (neither sweep nor panel)."""
    from bench.judging import cnn_tasks, judging_set
    from collectors.rules import rule_schedule

    def deep(task) -> bool:
        if "conv" not in task.task_name:
            return False
        try:
            auto, sweep, panel = (rule_schedule(task, hw, blocking=p).decisions for p in PLANS)
        except ValueError:
            return False
        return auto != sweep and auto != panel and not _window(task)

    tasks = cnn_tasks(hw, deep)
    seen = {t.workload_key for t in tasks}
    return tasks + [t for t in judging_set(hw) if t.workload_key not in seen and deep(t)]


def _window(task) -> bool:
    from collectors.block_axes import block_axes
    from collectors.blocking import unvectorized
    from collectors.tir import as_module, block_realizes

    func = next(iter(as_module(task.mod).functions.values()))
    return any((a := block_axes(task.mod, str(r.block.name_hint))) is not None and unvectorized(a)
               for r, _ in block_realizes(func.body))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="default bench/results/deep_convolution-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("judge the deep convolution plan")

    from bench.studies.rule_variants import judge_variants, write_study
    from collectors.hardware import detect_hardware
    from collectors.rules import rule_schedule

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"deep_convolution-{hw.key.removeprefix('cpu-')}.json")
    tasks = deep_tasks(hw)
    print(f"{len(tasks)} convolutions take the deep plan on {hw.key}", flush=True)
    t0 = time.time()
    rows = judge_variants(tasks, hw, {f"rules_{p}": (lambda t, p=p: rule_schedule(t, hw, blocking=p).schedule) for p in PLANS})
    write_study(out, hw, t0, rows, {
        "deep_over": {p: speed_over(rows, "rules_auto", f"rules_{p}") for p in ("sweep", "panel")},
        "deep_over_corpus_best": speed_over(rows, "rules_auto", "corpus_best"),
        "sweep_over_corpus_best": speed_over(rows, "rules_sweep", "corpus_best"),
        "deep_over_ms_256": speed_over(rows, "rules_auto", "ms_256")}, report_md)


def report_md(res: dict) -> str:
    from bench.studies.rule_variants import latency_table

    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# The rules' deep plan for convolutions on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} zoo tasks take it. Speed of the deep plan (geomean): over the sweep it replaced "
             f"{f(s['deep_over']['sweep'])}, over the panel plan {f(s['deep_over']['panel'])}; over the corpus's best "
             f"record {f(s['deep_over_corpus_best'])} (the sweep: {f(s['sweep_over_corpus_best'])}; "
             f"{s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 {f(s['deep_over_ms_256'])} "
             f"({s['tasks_with_ms_256']} tasks). Written by `python -m bench.studies.deep_convolution`.", "",
             ] + latency_table(res["tasks"], {"rules_auto": "deep, us", "rules_sweep": "sweep", "rules_panel": "panel",
                                             "corpus_best": "corpus best", "ms_256": "MS@256"})
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
