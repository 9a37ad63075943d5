"""Schedule quality, side by side: the TLM against MetaSchedule, the rule baseline, a random
valid program and PyTorch eager, on tasks the model never saw.

    .venv/bin/python -m bench.quality [--tasks N] [--trials 256] [--model DIR]

Tasks: the judging set (``bench/judging.py``): every workload of the zoo's held-out models
(``collectors.zoo.HELD_OUT_MODELS``, absent from the model's training: a model whose metadata
does not record them as held out is refused) and every task of one ViT-B/16 encoder layer, a
model outside the zoo; ``--tasks N`` keeps the N heaviest (FLOPs x weight). MetaSchedule's
searches come from ``bench/references.py``'s cache when they ran before.

Per task, each method's schedule and the time it took to get it:
* ``tlm_top1``: greedy generation (no measurement);
* ``tlm_best_of_{4,10,32}``: k beams generated, all measured, the fastest kept (generation +
  measurement time);
* ``ms_{64,N}``: MetaSchedule's evolutionary search, one run of N trials (default 256); the
  64-trial figure is the best of its first 64 measured candidates (the search's first batch;
  a separate 64-trial run would start identically), its time the time to that point;
* ``rules``: ``collectors.rules.rule_schedule`` (no measurement);
* ``random``: the first random valid program of the design space (seed 1);
* ``torch_eager``: the PyTorch call verified to reproduce the task's output.

Every schedule is then **re-measured in one ``measure_schedules`` call per task**
(``collectors.judge``: one builder, one runner, one evaluator setting, 3 runs x 3 repeats,
median; each checked against the unscheduled program), so no method is judged by a latency
recorded elsewhere; a best-of-k method's time includes k x the mean measurement time per
schedule of that call. Aggregates:
geometric-mean speed relative to MetaSchedule@N, weighted latency (sum of weight x latency
over the tasks), time-to-parity (how long the N-trial search took to first measure a schedule
as fast as the TLM's top-1, from the search's own timings), % of peak for matmul-like tasks
(against a 2048^3 PyTorch matmul on this machine), and greedy determinism (two runs, one
schedule). Writes ``bench/results/quality.json``, ``quality.md`` and two PNG plots.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench._common import geomean, machine
from bench.judging import CORPUS, OUTSIDE_DESCRIPTION, check_unseen, judging_set

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
ROOT = os.path.dirname(HERE)
KS = (4, 10, 32)


def peak_gflops(threads: int) -> float:
    import torch

    from collectors.compile import time_torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    s = time_torch(lambda x, y: x @ y, (a, b), threads=threads, warmup=3, runs=10)
    return 2 * 2048 ** 3 / s / 1e9


def one_task(task: Any, hw: Any, model: Any, tok: Any, trials: int) -> dict:
    """Every method on one task, judged in one measurement call (collectors.judge)."""
    from bench.references import reference_search
    from collectors.judge import Method, judge, random_method, rules_method
    from tlm.service.generator import generate

    g1, g1b = generate(task, hw, model, tok, k=1), generate(task, hw, model, tok, k=1)
    methods = {"tlm_top1": Method([g1.candidates[0].schedule], g1.generate_s + g1.check_s)}
    for k in KS:
        g = generate(task, hw, model, tok, k=k)
        methods[f"tlm_best_of_{k}"] = Method([c.schedule for c in g.candidates], g.generate_s + g.check_s,
                                             measured=True)
    methods["rules"] = rules_method(task, hw)
    methods["random"] = random_method(task, hw)
    search = reference_search(task, hw, trials, budgets=(64,))
    methods.update(search.methods)
    row = {"task": task.task_name, "model": task.model, "op_kind": task.op_kind, "flops": task.flops,
           "weight": task.weight, "deterministic_greedy": g1.candidates[0].text == g1b.candidates[0].text,
           "methods": judge(task, hw, methods)}
    tlm = row["methods"]["tlm_top1"]["latency_s"]
    if tlm is not None:  # from the search's own timings of its candidates
        row["ms_parity_s"] = next((t for t, lat in search.curve if lat <= tlm), None)
    return row


def aggregate(rows: list[dict], trials: int, peak: float) -> dict:
    ref = f"ms_{trials}"
    names = sorted({n for r in rows for n in r["methods"]})
    out: dict = {"reference": ref, "peak_gflops": peak, "methods": {}}
    for n in names:
        speed = [r["methods"][ref]["latency_s"] / r["methods"][n]["latency_s"] for r in rows
                 if n in r["methods"] and r["methods"][n]["latency_s"] and r["methods"].get(ref, {}).get("latency_s")]
        common = [r for r in rows if all(r["methods"].get(m, {}).get("latency_s") for m in (n, ref))]
        out["methods"][n] = {
            "tasks": len(speed), "geomean_speed_vs_ref": geomean(speed),
            "weighted_latency_s": sum(r["weight"] * r["methods"][n]["latency_s"] for r in common),
            "ref_weighted_latency_s": sum(r["weight"] * r["methods"][ref]["latency_s"] for r in common),
            "geomean_time_s": geomean([r["methods"][n]["time_s"] for r in rows if n in r["methods"]]) or 0.0,
        }
    mm = [r for r in rows if r["op_kind"] in ("matmul", "conv2d") and r["flops"]]
    out["pct_of_peak"] = {n: geomean([100 * r["flops"] / r["methods"][n]["latency_s"] / 1e9 / peak for r in mm
                                      if r["methods"].get(n, {}).get("latency_s")]) for n in names}
    out["deterministic_greedy"] = all(r["deterministic_greedy"] for r in rows)
    par = [r["ms_parity_s"] / r["methods"]["tlm_top1"]["time_s"] for r in rows if r.get("ms_parity_s")]
    out["time_to_parity"] = {"tasks_reached": len(par), "tasks": len(rows),
                             "geomean_ms_parity_over_tlm_time": geomean(par)}
    return out


def plots(rows: list[dict], agg: dict, stem: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = agg["reference"]
    names = [n for n in ("tlm_top1", "tlm_best_of_10", "tlm_best_of_32", "ms_64", "rules", "random", "torch_eager")
             if n in agg["methods"]]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 1.2), 4.5))
    w = 0.8 / len(names)
    for j, n in enumerate(names):
        ys = [(r["methods"][n]["latency_s"] / r["methods"][ref]["latency_s"])
              if r["methods"].get(n, {}).get("latency_s") and r["methods"].get(ref, {}).get("latency_s") else 0
              for r in rows]
        ax.bar([i + j * w for i in range(len(rows))], ys, w, label=n)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(rows))], [r["task"] for r in rows], rotation=30, ha="right")
    ax.set_ylabel(f"latency / {ref} (lower is better)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    p1 = f"{stem}_latency_ratio.png"
    fig.savefig(p1, dpi=110)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for n in names:
        pts = [(r["methods"][n]["time_s"], r["methods"][n]["latency_s"] / r["methods"][ref]["latency_s"])
               for r in rows if r["methods"].get(n, {}).get("latency_s") and r["methods"][ref].get("latency_s")
               and r["methods"][n]["time_s"] > 0]
        if pts:
            ax.scatter(*zip(*pts), label=n, s=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time to get the schedule (s)")
    ax.set_ylabel(f"latency / {ref}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p2 = f"{stem}_compile_time.png"
    fig.savefig(p2, dpi=110)
    return [p1, p2]


def report_md(res: dict) -> str:
    agg, rows = res["aggregate"], res["tasks"]
    ref = agg["reference"]
    lines = [f"# Schedule quality on {res['hardware']} ({res['model_id']})", "",
             f"Held-out zoo models {', '.join(res['held_out_models'])} and one ViT-B/16 layer (outside the zoo); "
             f"MetaSchedule evolutionary up to {res['trials']} trials; everything re-measured in one call per task "
             f"(3x3 runs, median, checked). Reference: `{ref}`. Greedy deterministic: {agg['deterministic_greedy']}.",
             "", "| method | tasks | speed vs ref (geomean) | weighted latency / ref | time per task (geomean s) "
             "| % of peak (matmul/conv) |", "|---|---:|---:|---:|---:|---:|"]
    for n, m in agg["methods"].items():
        wl = m["weighted_latency_s"] / m["ref_weighted_latency_s"] if m["ref_weighted_latency_s"] else float("nan")
        pk = agg["pct_of_peak"].get(n)
        lines.append(f"| {n} | {m['tasks']} | {m['geomean_speed_vs_ref'] or float('nan'):.2f} | {wl:.2f} | "
                     f"{m['geomean_time_s']:.2f} | {pk if pk is None else round(pk, 1)} |")
    tp = agg["time_to_parity"]
    lines += ["", f"Time to parity: MetaSchedule reached the TLM top-1's latency on {tp['tasks_reached']} of "
              f"{tp['tasks']} tasks, after {tp['geomean_ms_parity_over_tlm_time']} x the TLM's generation time "
              "(geomean over those tasks).", "", "| task | model | " + " | ".join(agg["methods"]) + " |",
              "|---|---|" + "---:|" * len(agg["methods"])]
    for r in rows:
        cells = []
        for n in agg["methods"]:
            m = r["methods"].get(n)
            cells.append(f"{m['latency_s'] * 1e6:.0f} us" if m and m["latency_s"] else "-")
        lines.append(f"| {r['task']} | {r['model']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--model", default=None, help="model directory (default: the shipped model of this host's key)")
    ap.add_argument("--tasks", type=int, default=None, help="only the N heaviest tasks of the judging set")
    ap.add_argument("--trials", type=int, default=256)
    ap.add_argument("--out", default=os.path.join(RESULTS, "quality.json"))
    args = ap.parse_args()

    import logging

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    from collectors.hardware import detect_hardware
    from collectors.zoo import HELD_OUT_MODELS
    from tlm.service.catalog import model_for, resolve_model
    from tlm.model.network import load_model, read_model_info

    hw = detect_hardware("cpu")
    entry = resolve_model(args.model) if args.model else model_for(hw.key)
    model, tok, _ = load_model(entry.path)
    tasks = judging_set(hw, corpus_dir=args.corpus, max_tasks=args.tasks)
    try:
        check_unseen(entry.model_id, read_model_info(entry.path), tasks)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    t0 = time.time()
    peak = peak_gflops(hw.cores)
    rows = []
    for i, task in enumerate(tasks):
        print(f"[{i + 1}/{len(tasks)}] {task.task_name} ({task.model})", flush=True)
        rows.append(one_task(task, hw, model, tok, args.trials))
        m = rows[-1]["methods"]
        print("   " + ", ".join(f"{n} {v['latency_s'] * 1e6:.0f}us/{v['time_s']:.1f}s" for n, v in m.items()
                                if v["latency_s"]), flush=True)
        res = {"machine": machine(hw),
               "hardware": hw.key, "model_id": entry.model_id, "held_out_models": list(HELD_OUT_MODELS),
               "outside_zoo": OUTSIDE_DESCRIPTION,
               "trials": args.trials, "ks": list(KS), "wall_s": round(time.time() - t0, 1), "tasks": rows,
               "aggregate": aggregate(rows, args.trials, peak)}
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:  # after every task: a stopped run keeps what it measured
            json.dump(res, f, indent=2)
    stem = os.path.splitext(args.out)[0]
    res["plots"] = [os.path.relpath(p, os.path.dirname(args.out)) for p in plots(rows, res["aggregate"], stem)]
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    with open(stem + ".md", "w") as f:
        f.write(report_md(res))
    print(report_md(res))


if __name__ == "__main__":
    main()
