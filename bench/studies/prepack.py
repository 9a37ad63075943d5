"""Whole models built with their weights prepacked (``tlm compile``'s default) against the same
model with every weight read in its own layout (``--keep-weight-layout``), served schedules alike.

    .venv/bin/python -m bench.studies.prepack [--model bert_base --model mobilenetv2]

Why: the rules' dense matmuls read the weight ``B`` unpacked, its rows a whole matrix apart, so
their inner reduction is capped where those rows share an L1 set (16 on BERT's 768 x 3072
weight) and the 8 x 32 micro-tile's accumulators go back to memory every 16 multiply-adds. A
layout-free weight (TVM's ``AttachAttrLayoutFreeBuffers``) lets ``RewriteLayout`` read it in the
order the tiles walk it (BLIS's packed B), rewritten once at compile time
(``collectors.compile.prepacked``).

Per model, in one process: its tasks extracted both ways and scheduled as ``tlm compile``
schedules them (the shipped model's ranked top-1, no measurement, batch norms folded; the corpus
is not asked, so both builds are the model's), each build checked against PyTorch and timed in
turn (``collectors.compile.time_side_by_side``) beside PyTorch eager. Writes
``bench/results/prepack-<key>.json`` and Markdown beside it.
"""
from __future__ import annotations

import argparse
import os
import time

from bench._common import RESULTS, machine, refuse_beside_measuring, write_noted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=None, help="zoo model (repeat; default bert_base, mobilenetv2)")
    ap.add_argument("--out", default=None, help="default bench/results/prepack-<key>.json")
    args = ap.parse_args()
    refuse_beside_measuring("time whole models")

    from bench.studies.served_builds import served, timed
    from collectors.compile import compile_model
    from collectors.hardware import detect_hardware
    from collectors.layout import layout_rewrites
    from collectors.tir import schedule_of
    from tlm.service.whole_model import database_of

    host = detect_hardware("cpu")
    out = args.out or os.path.join(RESULTS, f"prepack-{host.key.removeprefix('cpu-')}.json")
    models, t0 = [], time.time()
    for name in args.model or ["bert_base", "mobilenetv2"]:
        builds, info, keys = {}, {}, {}
        for layout in ("packed", "plain", "packed_unpadded"):
            t1 = time.perf_counter()
            m = served(name, prepack_weights=layout != "plain", corpus=False, pad_linears=layout == "packed")
            keys[layout] = sorted(c.task.workload_key for c in m.chosen)
            if layout == "packed_unpadded" and keys[layout] == keys["packed"]:
                break  # no linear layer of this model is ragged: padding changes nothing
            builds[layout] = compile_model(m.relax_mod, m.hardware, database_of(m.chosen, m.hardware))
            rewritten = sum(bool(layout_rewrites(schedule_of(c.task.mod, c.trace).mod)) for c in m.chosen
                            if c.trace is not None)
            info[layout] = {"tasks": len(m.chosen), "scheduled": sum(c.trace is not None for c in m.chosen),
                            "weights_rewritten": rewritten, "compile_s": round(time.perf_counter() - t1, 1),
                            "tlm_model": m.model_id}
        res = timed(builds, m)
        models.append({"model": name, "builds": info, **res})
        print(name, {n: f"{v * 1e3:.2f} ms" for n, v in res["latency_s"].items()}, info, flush=True)
    write_noted({"machine": machine(host), "hardware": host.key, "wall_s": round(time.time() - t0), "models": models},
                out, report_md, None)


def report_md(res: dict) -> str:
    lines = [f"# Whole models with prepacked weights on {res['hardware']} ({res['machine'].get('cpu', '')})", "",
             "Latency in ms (medians, the builds timed in turn in one process); served schedules (the shipped "
             "model's ranked top-1, unmeasured, the corpus not asked); every build checked against PyTorch. "
             "Prepacked: the linear layers' ragged axes padded too (`collectors.padding`); unpadded: the same "
             "without, built only where padding changes a task. Written by `python -m bench.studies.prepack`.", "",
             "| model | tasks | tasks reading a weight packed | prepacked | unpadded | own layout | PyTorch eager "
             "| prepacked speedup | vs PyTorch eager | compile s (prepacked / own) | correct |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for m in res["models"]:
        lat, b = m["latency_s"], m["builds"]
        unpadded = f"{lat['packed_unpadded'] * 1e3:.2f}" if "packed_unpadded" in lat else "-"
        lines.append(f"| {m['model']} | {b['packed']['tasks']} | {b['packed']['weights_rewritten']} | "
                     f"{lat['packed'] * 1e3:.2f} | {unpadded} | {lat['plain'] * 1e3:.2f} | "
                     f"{lat['torch_eager'] * 1e3:.2f} | "
                     f"{lat['plain'] / lat['packed']:.2f}x | {lat['torch_eager'] / lat['packed']:.2f}x | "
                     f"{b['packed']['compile_s']} / {b['plain']['compile_s']} | "
                     f"{'yes' if all(m['correct'].values()) else 'NO'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
