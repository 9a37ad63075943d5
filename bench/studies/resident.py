"""The resident plan (each tall micro-tile's accumulators over the whole reduction:
``collectors.blocking.blocked_plan``) against the sweep, on every task where AVX-512's tall sweep
runs: where the rules take it (``resident_fits``) it should win, where they refuse it, lose.

    .venv/bin/python -m bench.studies.resident [--out bench/results/resident-<key>.json]

Tasks: every workload of the corpus and of the compiled judging set (weights prepacked) whose
forced resident program differs from the rules' without it. Per task, in one measurement call
(``collectors.judge``: checked, 3 x 3 runs, median): ``rules_auto``, ``rules_sweep`` (the rules
without the resident plan), ``rules_resident`` (forced), the key's fastest corpus record and MetaSchedule@256 where cached.
"""
from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager

from bench._common import RESULTS, refuse_beside_measuring, speed_over



@contextmanager
def never_resident():
    """The rules as they would be without the resident plan (``resident_fits`` always false): the
    tall sweep wherever it would run, every other plan as the rules choose it."""
    import collectors.blocking as blocking

    keep = blocking.resident_fits
    blocking.resident_fits = lambda *args, **kwargs: False
    try:
        yield
    finally:
        blocking.resident_fits = keep


def programs(task, hw) -> dict:
    """``rules_auto``, ``rules_sweep`` (:func:`never_resident`) and ``rules_resident`` (forced)."""
    from collectors.rules import rule_schedule

    with never_resident():
        sweep = rule_schedule(task, hw).schedule
    return {"rules_auto": rule_schedule(task, hw).schedule, "rules_sweep": sweep,
            "rules_resident": rule_schedule(task, hw, blocking="resident").schedule}


def resident_tasks(hw) -> list[tuple]:
    """``(task, its programs)`` of the corpus's and the compiled judging set's tasks where AVX-512's
    tall sweep runs: the forced resident program differs from the rules' without it."""
    from bench.judging import CORPUS, compiled_judging_set
    from collectors.tasks import task_from_index
    from storage import Corpus

    with Corpus.open(CORPUS) as corpus:
        tasks = [task_from_index(w) for w in corpus.workloads()]
    out, seen = [], set()
    for t in tasks + compiled_judging_set(hw):
        if t.workload_key in seen:
            continue
        seen.add(t.workload_key)
        try:
            made = programs(t, hw)
        except ValueError:
            continue
        if str(made["rules_sweep"].trace) != str(made["rules_resident"].trace):
            out.append((t, made))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="default bench/results/resident-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("judge the resident plan")

    from bench.studies.rule_variants import judge_variants, write_study
    from collectors.hardware import detect_hardware

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"resident-{hw.key.removeprefix('cpu-')}.json")
    found = resident_tasks(hw)
    made = {t.workload_key: m for t, m in found}  # built once: judged, then told taken or refused
    print(f"{len(found)} tasks run AVX-512's tall sweep on {hw.key}", flush=True)
    t0 = time.time()
    rows = judge_variants([t for t, _ in found], hw, {n: (lambda t, n=n: made[t.workload_key][n])
                                                      for n in ("rules_auto", "rules_sweep", "rules_resident")})
    for r in rows:
        m = made[r["workload_key"]]
        r["taken"] = str(m["rules_auto"].trace) == str(m["rules_resident"].trace)
    taken = [r for r in rows if r["taken"]]
    refused = [r for r in rows if not r["taken"]]
    write_study(out, hw, t0, rows, {
        "taken": len(taken), "taken_over_sweep": speed_over(taken, "rules_resident", "rules_sweep"),
        "refused_over_sweep": speed_over(refused, "rules_resident", "rules_sweep"),
        "taken_won": sum(r["latency_s"].get("rules_resident", 1) < r["latency_s"].get("rules_sweep", 0) for r in taken),
        "refused_lost": sum(r["latency_s"].get("rules_resident", 0) > r["latency_s"].get("rules_sweep", 1) for r in refused),
        "auto_over_ms_256": speed_over(rows, "rules_auto", "ms_256")}, report_md)


def report_md(res: dict) -> str:
    from bench.studies.rule_variants import latency_table

    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# The rules' resident plan on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} tasks run AVX-512's tall sweep. The rules take the resident plan on {s['taken']}: "
             f"there it ran {f(s['taken_over_sweep'])} the sweep (faster on {s['taken_won']}); on the "
             f"{s['tasks'] - s['taken']} they refuse it, it would run {f(s['refused_over_sweep'])} the sweep "
             f"(slower on {s['refused_lost']}). The rules against MetaSchedule@256: {f(s['auto_over_ms_256'])} "
             f"({s['tasks_with_ms_256']} tasks). Written by `python -m bench.studies.resident`.", "",
             ] + latency_table(res["tasks"], {"rules_auto": "rules, us", "rules_sweep": "sweep",
                                             "rules_resident": "resident", "corpus_best": "corpus best",
                                             "ms_256": "MS@256"})
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
