"""Where do the rules lose most to the corpus? The rules' program against the key's fastest
corpus record on its heaviest measured workloads: the list of rule defects to decode next.

    .venv/bin/python -m bench.studies.rules_gap [--tasks 60] [--out bench/results/rules_gap-<key>.json]

Tasks: the ``--tasks`` workloads of this host's key whose fastest corpus record is the slowest
(over 20 us: below that a call's noise is the gap), held out or not (the rules learn nothing).
Per task, in one measurement call (``collectors.judge``: checked, 3 x 3 runs, median): the
rules' program, the corpus's fastest record re-measured, MetaSchedule@256 where cached. The
Markdown lists the tasks worst first.
"""
from __future__ import annotations

import argparse
import os
import time

from bench._common import RESULTS, refuse_beside_measuring, speed_over

#: Below this the corpus's best is not judged: a call's noise is the gap.
MIN_LATENCY_S = 20e-6


def heaviest_tasks(hw, n: int) -> list:
    """The ``n`` workloads of ``hw``'s key whose fastest corpus record is the slowest."""
    from bench.judging import CORPUS
    from collectors.tasks import task_from_index
    from storage import Corpus

    with Corpus.open(CORPUS) as corpus:
        best = corpus.best_latencies(hw.key)
        workloads = {w["workload_key"]: w for w in corpus.workloads()}
    keys = sorted((k for k, v in best.items() if k in workloads and v > MIN_LATENCY_S), key=lambda k: -best[k])
    return [task_from_index(workloads[k]) for k in keys[:n]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=60, help="the N heaviest measured workloads (default 60)")
    ap.add_argument("--out", default=None, help="default bench/results/rules_gap-<key>.json")
    args = ap.parse_args()
    if args.tasks < 1:
        ap.error(f"--tasks must be at least 1, got {args.tasks}")
    refuse_beside_measuring("judge the rules against the corpus")

    from bench.studies.rule_variants import judge_variants, write_study
    from collectors.hardware import detect_hardware
    from collectors.rules import rule_schedule

    hw = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"rules_gap-{hw.key.removeprefix('cpu-')}.json")
    tasks = heaviest_tasks(hw, args.tasks)
    print(f"{len(tasks)} workloads of {hw.key}", flush=True)
    t0 = time.time()
    rows = judge_variants(tasks, hw, {"rules": lambda t: rule_schedule(t, hw).schedule})
    rows.sort(key=lambda r: r["latency_s"].get("corpus_best", 0) / r["latency_s"].get("rules", 1))
    write_study(out, hw, t0, rows, {"rules_over_corpus_best": speed_over(rows, "rules", "corpus_best"),
                                    "rules_over_ms_256": speed_over(rows, "rules", "ms_256"),
                                    "slower_by_10pct": sum(r["latency_s"].get("rules", 0) > 1.1 * r["latency_s"].get("corpus_best", 1e9)
                                                           for r in rows)}, report_md)


def report_md(res: dict) -> str:
    from bench.studies.rule_variants import latency_table

    s = res["summary"]
    f = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    lines = [f"# The rules against the corpus's best on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"{s['tasks']} heaviest measured workloads, worst first. The rules' program runs {f(s['rules_over_corpus_best'])} "
             f"the corpus's fastest record (geomean; over 10% slower on {s['slower_by_10pct']}) and "
             f"{f(s['rules_over_ms_256'])} MetaSchedule@256 ({s['tasks_with_ms_256']} tasks). "
             "Written by `python -m bench.studies.rules_gap`.", "",
             ] + latency_table(res["tasks"], {"rules": "rules, us", "corpus_best": "corpus best", "ms_256": "MS@256"})
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
