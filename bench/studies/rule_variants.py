"""What the rules' studies share (``window``, ``pad_location``, ``deep_convolution``): each
judges rule programs written several ways against the key's best corpus record and
MetaSchedule@256, one measurement call per task, and tabulates the latencies."""
from __future__ import annotations

from typing import Any, Callable


def judge_variants(tasks: list, hw: Any, variants: dict[str, Callable[[Any], Any]]) -> list[dict]:
    """Per task, in one ``collectors.judge`` call (checked, 3 x 3 runs, median): the schedule each
    of ``variants`` (name -> task -> schedule) writes, ``corpus_best`` and ``ms_256`` where known
    (``bench.references.known_references``); rows of ``{task, model, workload_key, flops, weight,
    latency_s: {method: seconds}}``, each printed as it is measured."""
    from bench.judging import CORPUS
    from bench.references import known_references
    from collectors.judge import Method, judge
    from storage import Corpus

    rows = []
    with Corpus.open(CORPUS) as corpus:
        for t in tasks:
            methods = {n: Method([make(t)], 0.0) for n, make in variants.items()} | known_references(t, hw, corpus)
            res = judge(t, hw, methods, torch_eager=False)
            lat = {n: v["latency_s"] for n, v in res.items() if isinstance(v, dict) and v.get("latency_s")}
            rows.append({"task": t.task_name, "model": t.model, "workload_key": t.workload_key, "flops": t.flops,
                         "weight": t.weight, "latency_s": lat})
            print(t.model, t.task_name, {n: f"{v * 1e6:.1f} us" for n, v in lat.items()}, flush=True)
    return rows


def latency_table(rows: list[dict], columns: dict[str, str]) -> list[str]:
    """Markdown lines: a row per task, a column per method (``columns``: method -> heading), in us."""
    out = ["| model | task | " + " | ".join(columns.values()) + " |", "|---|---|" + "---:|" * len(columns)]
    for r in rows:
        lat = r["latency_s"]
        out.append(f"| {r['model']} | {r['task']} | "
                   + " | ".join(f"{lat[m] * 1e6:.1f}" if m in lat else "-" for m in columns) + " |")
    return out


def write_study(out: str, hw: Any, started: float, rows: list[dict], speeds: dict, report_md: Callable[[dict], str]) -> None:
    """The study's JSON (``out``) and Markdown beside it: the machine, the rows, and a summary of
    ``speeds`` (name -> geomean speed, or a dict of them) with the task counts it was taken over."""
    import time

    from bench._common import machine, write_noted

    summary = {"tasks": len(rows), **speeds,
               "tasks_with_ms_256": sum("ms_256" in r["latency_s"] for r in rows),
               "tasks_with_corpus_best": sum("corpus_best" in r["latency_s"] for r in rows)}
    write_noted({"machine": machine(hw), "hardware": hw.key, "wall_s": round(time.time() - started), "tasks": rows,
                 "summary": summary}, out, report_md, None)
