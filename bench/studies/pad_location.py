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

from bench._common import RESULTS, machine, refuse_beside_measuring, speed_over, write_noted


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

    from bench.judging import CORPUS
    from bench.references import known_references
    from collectors.hardware import detect_hardware
    from collectors.judge import Method, judge
    from collectors.rules import rule_schedule
    from storage import Corpus

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"pad_location-{hw.key.removeprefix('cpu-')}.json")
    tasks = changed_tasks(hw)
    print(f"{len(tasks)} tasks change on {hw.key}", flush=True)
    rows, t0 = [], time.time()
    with Corpus.open(CORPUS) as corpus:
        for t in tasks:
            methods = {"rules": Method([rule_schedule(t, hw).schedule], 0.0),
                       "rules_sketch": Method([rule_schedule(t, hw, locations="sketch").schedule], 0.0)}
            methods |= known_references(t, hw, corpus)
            res = judge(t, hw, methods, torch_eager=False)
            lat = {n: v["latency_s"] for n, v in res.items() if isinstance(v, dict) and v.get("latency_s")}
            rows.append({"task": t.task_name, "model": t.model, "workload_key": t.workload_key, "flops": t.flops,
                         "weight": t.weight, "latency_s": lat})
            print(t.model, t.task_name, {n: f"{v * 1e6:.1f} us" for n, v in lat.items()}, flush=True)
    res = {"machine": machine(hw), "hardware": hw.key, "wall_s": round(time.time() - t0), "tasks": rows,
           "summary": {"tasks": len(rows),
                       "rule_over_sketch": speed_over(rows, "rules", "rules_sketch"),
                       "rule_over_corpus_best": speed_over(rows, "rules", "corpus_best"),
                       "sketch_over_corpus_best": speed_over(rows, "rules_sketch", "corpus_best"),
                       "rule_over_ms_256": speed_over(rows, "rules", "ms_256"),
                       "tasks_with_ms_256": sum("ms_256" in r["latency_s"] for r in rows),
                       "tasks_with_corpus_best": sum("corpus_best" in r["latency_s"] for r in rows)}}
    write_noted(res, out, report_md, None)


def report_md(res: dict) -> str:
    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# Where the rules compute a convolution's pad, on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} zoo tasks change. Speed of the rule's location (geomean): over the design space's draw "
             f"{f(s['rule_over_sketch'])}; over the corpus's best record {f(s['rule_over_corpus_best'])} (the draw: "
             f"{f(s['sketch_over_corpus_best'])}; {s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 "
             f"{f(s['rule_over_ms_256'])} ({s['tasks_with_ms_256']} tasks). Written by "
             "`python -m bench.studies.pad_location`.", "",
             "| model | task | rule, us | sketch's draw, us | corpus best | MS@256 |", "|---|---|---:|---:|---:|---:|"]
    for r in res["tasks"]:
        lat = r["latency_s"]
        g = lambda n: f"{lat[n] * 1e6:.1f}" if n in lat else "-"  # noqa: E731
        lines.append(f"| {r['model']} | {r['task']} | {g('rules')} | {g('rules_sketch')} | {g('corpus_best')} | "
                     f"{g('ms_256')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
