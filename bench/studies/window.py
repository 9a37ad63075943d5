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

from bench._common import RESULTS, machine, refuse_beside_measuring, speed_over, write_noted


def window_tasks(hw) -> list:
    """The zoo's tasks (the corpus's graphs and MobileNetV2 folded) with a window-plan block."""
    from bench.judging import cnn_tasks
    from collectors.blocking import block_axes, unvectorized
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

    from bench.judging import CORPUS
    from bench.references import known_references
    from collectors.hardware import detect_hardware
    from collectors.judge import Method, judge
    from collectors.rules import rule_schedule
    from storage import Corpus

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"window-{hw.key.removeprefix('cpu-')}.json")
    tasks = window_tasks(hw)
    print(f"{len(tasks)} tasks take the window plan on {hw.key}", flush=True)
    rows, t0 = [], time.time()
    with Corpus.open(CORPUS) as corpus:
        for t in tasks:
            methods = {f"rules_{p}": Method([rule_schedule(t, hw, blocking=p).schedule], 0.0)
                       for p in ("auto", "sweep", "panel")}
            methods |= known_references(t, hw, corpus)
            res = judge(t, hw, methods, torch_eager=False)
            lat = {n: v["latency_s"] for n, v in res.items() if isinstance(v, dict) and v.get("latency_s")}
            rows.append({"task": t.task_name, "model": t.model, "workload_key": t.workload_key, "flops": t.flops,
                         "weight": t.weight, "latency_s": lat})
            print(t.model, t.task_name, {n: f"{v * 1e6:.1f} us" for n, v in lat.items()}, flush=True)
    res = {"machine": machine(hw), "hardware": hw.key, "wall_s": round(time.time() - t0), "tasks": rows,
           "summary": {"tasks": len(rows),
                       "window_over_vector": {p: speed_over(rows, "rules_auto", f"rules_{p}") for p in ("sweep", "panel")},
                       "window_over_corpus_best": speed_over(rows, "rules_auto", "corpus_best"),
                       "window_over_ms_256": speed_over(rows, "rules_auto", "ms_256"),
                       "tasks_with_ms_256": sum("ms_256" in r["latency_s"] for r in rows),
                       "tasks_with_corpus_best": sum("corpus_best" in r["latency_s"] for r in rows)}}
    write_noted(res, out, report_md, None)


def report_md(res: dict) -> str:
    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# The rules' window plan on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} zoo tasks take it (strided depthwise convolutions). Speed of the window plan (geomean): "
             f"over the vector plans it replaced, sweep {f(s['window_over_vector']['sweep'])}, panel "
             f"{f(s['window_over_vector']['panel'])}; over the corpus's best record {f(s['window_over_corpus_best'])} "
             f"({s['tasks_with_corpus_best']} tasks); over MetaSchedule@256 {f(s['window_over_ms_256'])} "
             f"({s['tasks_with_ms_256']} tasks). Written by `python -m bench.studies.window`.", "",
             "| model | task | window, us | sweep | panel | corpus best | MS@256 |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in res["tasks"]:
        lat = r["latency_s"]
        g = lambda n: f"{lat[n] * 1e6:.1f}" if n in lat else "-"  # noqa: E731
        lines.append(f"| {r['model']} | {r['task']} | {g('rules_auto')} | {g('rules_sweep')} | {g('rules_panel')} | "
                     f"{g('corpus_best')} | {g('ms_256')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
