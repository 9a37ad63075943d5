"""Strong rules (issue 32, item 6): does blocking like BLIS beat the Roller-style tiles, which
blocked plan where, and how near peak is the rule baseline on the held-out matmuls?

    .venv/bin/python -m bench.studies.rules [--convs 4] [--out bench/results/rules.json]
    .venv/bin/python -m bench.studies.rules --quality 20 --convs 4   # the quality benchmark's 20 tasks too

Tasks: every matmul of the judging set (the held-out models' workloads, ``bench.judging``) and
the first ``--convs`` convolutions of the fixed training sample (``bench.judging.training_sample``:
the rules learn nothing, so a training workload judges them as well as a held-out one). Per
task, in one measurement call (``collectors.judge``: checked, 3 x 3 runs, median): the blocked
rules (``collectors.rules.rule_schedule``: its default plan, ``rules_blocked``, and each blocked
plan of ``collectors.blocking.PLANS`` forced, ``rules_<plan>``), the Roller-style tiles they replaced
(``blocked=False``), the key's fastest corpus record when it has one (MetaSchedule's 64-trial
search, re-measured), MetaSchedule@256 where ``bench.references`` has it cached (``ms_256``:
never searched here) and PyTorch eager. ``--quality N``: the N heaviest tasks of the judging set
with the outside ViT layer, every kind, as ``bench.quality --tasks N`` judges them. % of peak
against ``bench.quality.peak_gflops`` (a 2048^3 PyTorch matmul on this machine), as the quality
benchmark reports it.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from bench._common import RESULTS, geomean, machine, refuse_beside_measuring, speed_over, write_noted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--convs", type=int, default=4, help="convolutions of the training sample to judge too")
    ap.add_argument("--quality", type=int, default=0,
                    help="judge the N heaviest tasks of the judging set (every kind, the ViT layer too) instead of its matmuls")
    ap.add_argument("--out", default=os.path.join(RESULTS, "rules.json"))
    args = ap.parse_args()
    refuse_beside_measuring("judge the rules")

    from bench.judging import judging_set, training_sample
    from bench.quality import peak_gflops
    from collectors.hardware import detect_hardware
    from collectors.judge import Method, judge
    from bench.references import known_references
    from collectors.blocking import PLANS
    from collectors.rules import rule_schedule
    from storage import Corpus
    from bench.judging import CORPUS

    hw = detect_hardware("cpu")
    if args.quality:
        tasks = judging_set(hw, max_tasks=args.quality)
    else:
        tasks = [t for t in judging_set(hw, outside=False) if t.op_kind in ("matmul", "batch_matmul", "dense")]
    training = [t for t in training_sample(hw.key, n=40) if t.op_kind == "conv2d"][: args.convs]
    tasks += training
    trained = {t.workload_key for t in training}
    peak = peak_gflops(hw.cores)
    rows = []
    t0 = time.time()
    with Corpus.open(CORPUS) as corpus:
        for t in tasks:
            methods = {"rules_blocked": Method([rule_schedule(t, hw).schedule], 0.0),
                       "rules_roller": Method([rule_schedule(t, hw, blocked=False).schedule], 0.0)}
            methods |= {f"rules_{p}": Method([rule_schedule(t, hw, blocking=p).schedule], 0.0) for p in PLANS[1:]}
            methods |= known_references(t, hw, corpus)
            res = judge(t, hw, methods)
            lat = {n: v["latency_s"] for n, v in res.items() if v.get("latency_s")}
            row = {"task": t.task_name, "model": t.model, "op_kind": t.op_kind, "flops": t.flops,
                   "held_out": t.workload_key not in trained, "latency_s": lat,
                   "pct_of_peak": {n: 100 * t.flops / v / 1e9 / peak for n, v in lat.items()}}
            rows.append(row)
            print(t.task_name, {n: f"{v * 1e3:.3f} ms ({row['pct_of_peak'][n]:.0f}%)" for n, v in lat.items()},
                  flush=True)
    held = [r for r in rows if r["held_out"] and r["op_kind"] in ("matmul", "batch_matmul", "dense")]
    referenced = [r for r in rows if "ms_256" in r["latency_s"]]
    res = {"machine": machine(hw), "hardware": hw.key, "peak_gflops": peak, "wall_s": round(time.time() - t0),
           "tasks": rows,
           "summary": {
               "held_out_matmuls_pct_of_peak": {n: geomean([r["pct_of_peak"].get(n) for r in held])
                                                for n in ("rules_blocked", "rules_roller", "torch_eager")},
               "blocked_over_roller": {"held_out_matmuls": speed_over(held, "rules_blocked", "rules_roller"),
                                       "convolutions": speed_over([r for r in rows if not r["held_out"]],
                                                             "rules_blocked", "rules_roller")},
               "blocked_over_corpus_best": speed_over(rows, "rules_blocked", "corpus_best"),
               "over_ms_256": {n: speed_over(referenced, n, "ms_256")
                               for n in ("rules_blocked", "rules_roller", *(f"rules_{p}" for p in PLANS[1:]))},
               "tasks_with_ms_256": len(referenced),
               "blocked_over_torch_eager": speed_over(rows, "rules_blocked", "torch_eager")}}
    write_noted(res, args.out, report_md, None)
    print(json.dumps(res["summary"], indent=2))


def report_md(res: dict) -> str:
    s = res["summary"]
    pk = s["held_out_matmuls_pct_of_peak"]
    lines = [f"# Strong rules on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             f"Peak (a 2048^3 PyTorch matmul here): {res['peak_gflops']:.1f} GFLOP/s. Held-out matmuls, geomean % of "
             f"peak: blocked rules {pk['rules_blocked']:.0f}%, Roller-style {pk['rules_roller']:.0f}%, PyTorch eager "
             f"{pk['torch_eager']:.0f}%. Blocked over Roller-style (speed, geomean): held-out matmuls "
             f"{s['blocked_over_roller']['held_out_matmuls']:.2f}x, convolutions "
             f"{s['blocked_over_roller']['convolutions'] or float('nan'):.2f}x; over the corpus's best record "
             f"{s['blocked_over_corpus_best'] or float('nan'):.2f}x; over PyTorch eager {s['blocked_over_torch_eager']:.2f}x.",
             ""]
    ms = s.get("over_ms_256") or {}
    if s.get("tasks_with_ms_256"):
        lines += [f"Against MetaSchedule@256 (speed, geomean of the {s['tasks_with_ms_256']} tasks it is cached for): "
                  + ", ".join(f"{n.removeprefix('rules_')} {v:.2f}x" for n, v in ms.items() if v), ""]
    lines += ["| task | model | ms: blocked | sweep | panel | Roller-style | corpus best | MS@256 | torch eager "
              "| % of peak: blocked |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["tasks"]:
        lat = r["latency_s"]
        f = lambda n: f"{lat[n] * 1e3:.3f}" if n in lat else "-"  # noqa: E731
        lines.append(f"| {r['task']} | {r['model']} | {f('rules_blocked')} | {f('rules_sweep')} | {f('rules_panel')} | "
                     f"{f('rules_roller')} | {f('corpus_best')} | {f('ms_256')} | {f('torch_eager')} | "
                     f"{r['pct_of_peak'].get('rules_blocked', 0):.0f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
