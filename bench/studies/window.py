"""The window plan of the rules (``collectors.blocking.window_plan``): every zoo workload it
takes on this machine's key, measured against the vector plan it replaced and the corpus's best.

    .venv/bin/python -m bench.studies.window [--out bench/results/window-<key>.json]

Tasks: the CNN zoo models' tasks (full size, as the corpus collects them, and MobileNetV2's as
``tlm compile`` folds them) with a block the window plan takes (``blocking.unvectorized``: a
strided, depthwise convolution), each once. Per task, in one measurement call
(``collectors.judge``: checked, 3 x 3 runs, median): the rules (``rules_auto``: the window plan),
the rules forced to the vector plans they wrote before (``rules_sweep``, ``rules_panel``), the
key's fastest corpus record and MetaSchedule@256 where ``bench.references`` has it cached.
"""
from __future__ import annotations

import argparse
import os
import time

from bench._common import RESULTS, refuse_beside_measuring, speed_over


def window_tasks(hw) -> list:
    """The zoo's tasks (the corpus's graphs and MobileNetV2 folded) with a window-plan block."""
    from bench.judging import cnn_tasks
    from collectors.block_axes import block_axes
    from collectors.blocking import unvectorized
    from collectors.tir import as_module, block_realizes

    def takes(task) -> bool:
        func = next(iter(as_module(task.mod).functions.values()))
        names = {str(r.block.name_hint) for r, _ in block_realizes(func.body)}
        return any((a := block_axes(task.mod, n)) is not None and unvectorized(a) for n in names)

    return cnn_tasks(hw, takes, folded=("mobilenetv2",))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="default bench/results/window-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("judge the window plan")

    from bench.studies.rule_variants import judge_variants, write_study
    from collectors.hardware import detect_hardware
    from collectors.rules import rule_schedule

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"window-{hw.key.removeprefix('cpu-')}.json")
    tasks = window_tasks(hw)
    print(f"{len(tasks)} tasks take the window plan on {hw.key}", flush=True)
    t0 = time.time()
    rows = judge_variants(tasks, hw, {f"rules_{p}": (lambda t, p=p: rule_schedule(t, hw, blocking=p).schedule)
                                      for p in ("auto", "sweep", "panel")})
    write_study(out, hw, t0, rows, {
        "window_over_vector": {p: speed_over(rows, "rules_auto", f"rules_{p}") for p in ("sweep", "panel")},
        "window_over_corpus_best": speed_over(rows, "rules_auto", "corpus_best"),
        "window_over_ms_256": speed_over(rows, "rules_auto", "ms_256")}, report_md)


def report_md(res: dict) -> str:
    from bench.studies.rule_variants import latency_table

    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# The rules' window plan on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} zoo tasks take it (strided depthwise convolutions). Speed of the window plan (geomean): "
             f"over the vector plans it replaced, sweep {f(s['window_over_vector']['sweep'])}, panel "
             f"{f(s['window_over_vector']['panel'])}; over the corpus's best record {f(s['window_over_corpus_best'])} "
             f"({s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 {f(s['window_over_ms_256'])} "
             f"({s['tasks_with_ms_256']} tasks). Written by `python -m bench.studies.window`.", "",
             ] + latency_table(res["tasks"], {"rules_auto": "window, us", "rules_sweep": "sweep", "rules_panel": "panel",
                                             "corpus_best": "corpus best", "ms_256": "MS@256"})
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
