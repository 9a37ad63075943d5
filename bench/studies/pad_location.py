"""Where the rules compute a convolution's pad (``collectors.rules.compute_location``): every zoo
task whose rule program it changes, measured against the location the design space drew (what
the rules kept before), the key's best corpus record and MetaSchedule@256 where cached.

    .venv/bin/python -m bench.studies.pad_location [--out bench/results/pad_location-<key>.json]

Tasks: the CNN zoo models' tasks (full size, as the corpus collects them; MobileNetV2 and
EfficientNet-B0 also as ``tlm compile`` folds them) whose rule program computes a pad somewhere
else than the sketch's draw did. Per task, in one measurement call (``collectors.judge``:
checked, 3 x 3 runs, median): ``rules`` (the rule's location), ``rules_sketch`` (the draw), the
key's fastest corpus record and MetaSchedule@256 where ``bench.references`` has it cached.
"""
from __future__ import annotations

import argparse
import os
import time

from bench._common import RESULTS, refuse_beside_measuring, speed_over


def changed_tasks(hw) -> list:
    """The zoo's convolutional tasks whose rule program the compute-location rule changes."""
    from bench.judging import cnn_tasks
    from collectors.rules import rule_schedule

    def changes(task) -> bool:
        try:
            return rule_schedule(task, hw).decisions != rule_schedule(task, hw, locations="sketch").decisions
        except ValueError:  # no valid rule program either way: nothing to judge
            return False

    return cnn_tasks(hw, lambda t: "conv" in t.task_name and changes(t))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="default bench/results/pad_location-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("judge the pad locations")

    from bench.studies.rule_variants import judge_variants, write_study
    from collectors.hardware import detect_hardware
    from collectors.rules import rule_schedule

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"pad_location-{hw.key.removeprefix('cpu-')}.json")
    tasks = changed_tasks(hw)
    print(f"{len(tasks)} tasks change on {hw.key}", flush=True)
    t0 = time.time()
    rows = judge_variants(tasks, hw, {"rules": lambda t: rule_schedule(t, hw).schedule,
                                      "rules_sketch": lambda t: rule_schedule(t, hw, locations="sketch").schedule})
    write_study(out, hw, t0, rows, {
        "rule_over_sketch": speed_over(rows, "rules", "rules_sketch"),
        "rule_over_corpus_best": speed_over(rows, "rules", "corpus_best"),
        "sketch_over_corpus_best": speed_over(rows, "rules_sketch", "corpus_best"),
        "rule_over_ms_256": speed_over(rows, "rules", "ms_256")}, report_md)


def report_md(res: dict) -> str:
    from bench.studies.rule_variants import latency_table

    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# Where the rules compute a convolution's pad, on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} zoo tasks change. Speed of the rule's location (geomean): over the design space's draw "
             f"{f(s['rule_over_sketch'])}; over the corpus's best record {f(s['rule_over_corpus_best'])} (the draw: "
             f"{f(s['sketch_over_corpus_best'])}; {s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 "
             f"{f(s['rule_over_ms_256'])} ({s['tasks_with_ms_256']} tasks). Written by "
             "`python -m bench.studies.pad_location`.", "",
             ] + latency_table(res["tasks"], {"rules": "rule, us", "rules_sketch": "sketch's draw, us", "corpus_best": "corpus best",
                                             "ms_256": "MS@256"})
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
