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

from bench._common import RESULTS, machine, refuse_beside_measuring, speed_over, write_noted

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
    from collectors.blocking import block_axes, unvectorized
    from collectors.tir import as_module, block_realizes

    func = next(iter(as_module(task.mod).functions.values()))
    return any((a := block_axes(task.mod, str(r.block.name_hint))) is not None and unvectorized(a)
               for r, _ in block_realizes(func.body))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="default bench/results/deep_convolution-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("judge the deep convolution plan")

    from bench.judging import CORPUS
    from bench.references import known_references
    from collectors.hardware import detect_hardware
    from collectors.judge import Method, judge
    from collectors.rules import rule_schedule
    from storage import Corpus

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"deep_convolution-{hw.key.removeprefix('cpu-')}.json")
    tasks = deep_tasks(hw)
    print(f"{len(tasks)} convolutions take the deep plan on {hw.key}", flush=True)
    rows, t0 = [], time.time()
    with Corpus.open(CORPUS) as corpus:
        for t in tasks:
            methods = {f"rules_{p}": Method([rule_schedule(t, hw, blocking=p).schedule], 0.0) for p in PLANS}
            methods |= known_references(t, hw, corpus)
            res = judge(t, hw, methods, torch_eager=False)
            lat = {n: v["latency_s"] for n, v in res.items() if isinstance(v, dict) and v.get("latency_s")}
            rows.append({"task": t.task_name, "model": t.model, "workload_key": t.workload_key, "flops": t.flops,
                         "weight": t.weight, "latency_s": lat})
            print(t.model, t.task_name, {n: f"{v * 1e6:.1f} us" for n, v in lat.items()}, flush=True)
    res = {"machine": machine(hw), "hardware": hw.key, "wall_s": round(time.time() - t0), "tasks": rows,
           "summary": {"tasks": len(rows),
                       "deep_over": {p: speed_over(rows, "rules_auto", f"rules_{p}") for p in ("sweep", "panel")},
                       "deep_over_corpus_best": speed_over(rows, "rules_auto", "corpus_best"),
                       "sweep_over_corpus_best": speed_over(rows, "rules_sweep", "corpus_best"),
                       "deep_over_ms_256": speed_over(rows, "rules_auto", "ms_256"),
                       "tasks_with_ms_256": sum("ms_256" in r["latency_s"] for r in rows),
                       "tasks_with_corpus_best": sum("corpus_best" in r["latency_s"] for r in rows)}}
    write_noted(res, out, report_md, None)


def report_md(res: dict) -> str:
    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# The rules' deep plan for convolutions on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} zoo tasks take it. Speed of the deep plan (geomean): over the sweep it replaced "
             f"{f(s['deep_over']['sweep'])}, over the panel plan {f(s['deep_over']['panel'])}; over the corpus's best "
             f"record {f(s['deep_over_corpus_best'])} (the sweep: {f(s['sweep_over_corpus_best'])}; "
             f"{s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 {f(s['deep_over_ms_256'])} "
             f"({s['tasks_with_ms_256']} tasks). Written by `python -m bench.studies.deep_convolution`.", "",
             "| model | task | deep, us | sweep | panel | corpus best | MS@256 |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in res["tasks"]:
        lat = r["latency_s"]
        g = lambda n: f"{lat[n] * 1e6:.1f}" if n in lat else "-"  # noqa: E731
        lines.append(f"| {r['model']} | {r['task']} | {g('rules_auto')} | {g('rules_sweep')} | {g('rules_panel')} | "
                     f"{g('corpus_best')} | {g('ms_256')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
