"""Whole models built with the vectorized float32 exp and erf (``collectors.fast_math``) against
TVM's own (a libm ``expf`` / ``erff`` call per vector lane), served schedules and TVM's untuned
lowering alike.

    .venv/bin/python -m bench.studies.fast_exp [--model efficientnet_b0 --model bert_base]

Per model, in one process: its tasks scheduled as ``tlm compile`` schedules them (no
measurement, batch norms folded), then four builds (served / untuned x fast / exact exp), each
checked against PyTorch, timed in turn (``collectors.compile.time_side_by_side``) beside PyTorch
eager. Writes ``bench/results/fast_exp-<key>.json`` and Markdown beside it.
"""
from __future__ import annotations

import argparse
import os
import time

from bench._common import RESULTS, machine, refuse_beside_measuring, write_noted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=None, help="zoo model (repeat; default efficientnet_b0)")
    ap.add_argument("--out", default=None, help="default bench/results/fast_exp-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("time whole models")

    from bench.studies.served_builds import served, timed
    from collectors.compile import compile_model
    from collectors.hardware import detect_hardware
    from tlm.service.whole_model import database_of

    host = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"fast_exp-{host.key.removeprefix('cpu-')}.json")
    models, t0 = [], time.time()
    for name in args.model or ["efficientnet_b0"]:
        m = served(name)
        db = database_of(m.chosen, m.hardware)
        builds = {f"{what}_{exp}": compile_model(m.relax_mod, m.hardware, db if what == "served" else None,
                                                 fast_exp=exp == "fast")
                  for what in ("served", "untuned") for exp in ("fast", "exact")}
        res = timed(builds, m)
        models.append({"model": name, "tlm_model": m.model_id, "tasks": len(m.chosen), **res})
        print(name, {n: f"{v * 1e3:.2f} ms" for n, v in res["latency_s"].items()}, flush=True)
    write_noted({"machine": machine(host), "hardware": host.key, "wall_s": round(time.time() - t0), "models": models},
                out, report_md, None)


def report_md(res: dict) -> str:
    lines = [f"# Whole models with the vectorized exp and erf on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             "Latency in ms (medians, timed in turn in one process); every build checked against PyTorch "
             "(max abs error). Written by `python -m bench.studies.fast_exp`.", "",
             "| model | served, fast | served, TVM's | untuned, fast | untuned, TVM's | PyTorch eager | "
             "served speedup | max abs error (fast) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for m in res["models"]:
        lat = m["latency_s"]
        g = lambda n: f"{lat[n] * 1e3:.2f}" if n in lat else "-"  # noqa: E731
        lines.append(f"| {m['model']} | {g('served_fast')} | {g('served_exact')} | {g('untuned_fast')} | "
                     f"{g('untuned_exact')} | {g('torch_eager')} | {lat['served_exact'] / lat['served_fast']:.2f}x | "
                     f"{m['max_abs_err']['served_fast']:.2g} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
