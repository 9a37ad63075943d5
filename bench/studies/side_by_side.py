"""Two or more students on the same workloads, re-measured in one call per workload: a lever judged
without the 2x call-to-call noise of this host (issue 32; the language-version lever first).

    .venv/bin/python -m bench.studies.side_by_side --model A_DIR --model B_DIR --corpus DIR [--set heldout] [--tasks 8]
    .venv/bin/python -m bench.studies.side_by_side --model A_DIR --decoding plain --decoding healthy ...

Per workload of the fixed training sample (``--set train``) or of the held-out sample
(``--set heldout``, ``bench.learning.heldout_sample``): each model's greedy and ranked top-1
(ranked by ``tlm.service.catalog.ranker_for``) beside the teacher's program (the corpus's fastest
record), all measured in **one** ``collectors.judge`` call, so every ratio is within one call;
each program's static failure modes (``collectors.failure_modes``) and whether a greedy program
is the teacher's. With ``--decoding healthy`` too, each model also writes with healthy decoding
(``tlm.language.health``; methods ``<model>+healthy:...``): one model, two decodings, one call;
``--decoding healthy-no-parallel`` (or ``-no-vector``, ``-no-registers``, ``-no-reuse``) leaves one rule out.
``--temperature 1 --temperature 1.5``: the ranked pool sampled at each temperature (methods
``<model>:ranked_top1@T1.5``; the greedy program is the same at every one), with each pool's size.
``bench.learning student`` judges one model at a time, each in its own calls:
the same teacher program measured 274 and 390 us in two of them on the Zen 3.
Writes JSON (``--out``, default ``bench/results/levers/side_by_side-<set>.json``) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench._common import RESULTS, machine, refuse_beside_measuring, speed_over


def side_by_side(hardware: Any, model_dirs: list[str], *, corpus_dir: str | None, n: int, heldout: bool,
                 decodings: tuple[str, ...] = ("plain",), temperatures: tuple[float, ...] = (1.0,)) -> dict:
    """The rows and the geomean speeds against the teacher (module docstring)."""
    from bench.learning import _judged, _sample, heldout_sample
    from collectors.failure_modes import modes_of_schedule
    from collectors.judge import Method
    from collectors.tir import schedule_of
    from tlm.language import encode
    from tlm.model.network import load_model
    from tlm.service.catalog import ranker_for
    from tlm.service.generator import generate, ranked_pool

    loaded = {os.path.basename(os.path.normpath(d)): (load_model(d)[:2], ranker_for(d, hardware.key)[0])
              for d in model_dirs}
    models = {(name if how == "plain" else f"{name}+{how}"): (m, _decoding(how))
              for name, m in loaded.items() for how in decodings}
    tasks, best = heldout_sample(hardware, corpus_dir, n) if heldout else _sample(hardware, corpus_dir, n)
    ranked = {T: "ranked_top1" if len(temperatures) == 1 else f"ranked_top1@T{T:g}" for T in temperatures}
    rows = []
    for t in tasks:
        methods = {"corpus_best": Method([schedule_of(t.mod, best[t.workload_key]["trace_json"])], 0.0)}
        teacher = encode(t, hardware, best[t.workload_key]["trace_json"])
        is_teacher, pools = {}, {}
        for name, (((model, tok), ranker), how) in models.items():
            g = generate(t, hardware, model, tok, k=1, **how)
            methods[f"{name}:top1"] = Method([g.candidates[0].schedule], g.generate_s + g.check_s)
            c = g.candidates[0]
            is_teacher[name] = c.sketch_id == teacher.sketch_id and tuple(c.decisions) == tuple(teacher.decisions)
            # the whole pool (its first is the served top-1): a ranked answer of one samples none; a
            # decoding that changes the greedy sketches only ranks the same pool as its healthy rules'
            for T, label in ranked.items() if ranker is not None and "greedy_sketches" not in how else ():
                gr = ranked_pool(t, hardware, model, tok, ranker, healthy=how["healthy"], temperature=T)
                methods[f"{name}:{label}"] = Method([gr.candidates[0].schedule], gr.generate_s + gr.check_s)
                pools[f"{name}:{label}"] = gr.pool  # distinct programs the cost model ranked
        row = _judged(t, hardware, methods)
        row["modes"] = {m: list(modes_of_schedule(v.schedules[0], hardware)) for m, v in methods.items()}
        row["top1_is_teacher"] = is_teacher
        row["pool"] = pools
        rows.append(row)
    summary = {}
    for name in models:
        for how in ("top1", *ranked.values()):
            m = f"{name}:{how}"
            if not any(m in r["modes"] for r in rows):
                continue  # no ranker for this model
            summary[m] = {"vs_teacher": speed_over(rows, m, "corpus_best"),
                          "failed": sum(m in r["errors"] or "corpus_best" in r["errors"] for r in rows),
                          "in_a_failure_mode": sum(bool(r["modes"].get(m)) for r in rows) / max(1, len(rows))}
            if how != "top1":
                summary[m]["mean_pool"] = sum(r["pool"][m] for r in rows) / max(1, len(rows))
        summary[f"{name}:top1"]["is_teacher"] = sum(r["top1_is_teacher"][name] for r in rows)
    return {"set": "heldout" if heldout else "train", "workloads": len(rows), "models": model_dirs,
            "decodings": list(decodings), "temperatures": list(temperatures),
            "summary": summary, "tasks": rows}


#: how a model may write: every healthy rule, none, all but one (``healthy-no-<rule>``), the
#: register rule as it was (``healthy-registers-all``), or every healthy rule with the greedy program
#: chosen among every live sketch's (``healthy-all-sketches``; the default decodes the rules' sketch)
DECODINGS = ("plain", "healthy", "healthy-no-parallel", "healthy-no-vector", "healthy-no-registers",
             "healthy-no-reuse", "healthy-no-reread", "healthy-registers-all", "healthy-all-sketches")


def _decoding(how: str) -> dict:
    """The keywords of ``generate`` a decoding name stands for (:data:`DECODINGS`)."""
    from tlm.language.health import RULES

    if how == "healthy-registers-all":  # the register rule as it was: every vector register an accumulator
        return {"healthy": RULES - {"registers"} | {"registers-all"}}
    if how == "healthy-all-sketches":
        return {"healthy": True, "greedy_sketches": "all"}
    if how.startswith("healthy-no-"):
        return {"healthy": RULES - {how.removeprefix("healthy-no-")}}
    return {"healthy": how == "healthy"}


def _temperature(text: str) -> float:
    """A ``--temperature`` value: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a temperature: give a number above 0, e.g. 1.5")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="a model directory (repeat for several)")
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--set", choices=("train", "heldout"), default="heldout")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--decoding", action="append", choices=DECODINGS,
                    help="how each model writes (repeat for both; default plain)")
    ap.add_argument("--temperature", action="append", type=_temperature,
                    help="the ranked pool's sampling temperature (repeat for several; default 1)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from collectors.hardware import detect_hardware

    hw = detect_hardware("cpu")
    refuse_beside_measuring("judge students side by side")
    t0 = time.time()
    res = side_by_side(hw, args.model, corpus_dir=args.corpus, n=args.tasks, heldout=args.set == "heldout",
                       decodings=tuple(args.decoding or ("plain",)), temperatures=tuple(args.temperature or (1.0,)))
    res.update(machine=machine(hw), wall_s=round(time.time() - t0), corpus=args.corpus or "data/corpus")
    out = args.out or os.path.join(RESULTS, "levers", f"side_by_side-{args.set}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"{res['set']}, {res['workloads']} workloads, one measurement call each (speed vs the teacher's program):")
    for m, s in res["summary"].items():
        extra = (f", greedy = the teacher's program on {s['is_teacher']}" if "is_teacher" in s
                 else f", pool {s['mean_pool']:.0f} distinct programs")
        print(f"  {m:40s} {s['vs_teacher']:.2f}x, in a failure mode {s['in_a_failure_mode']:.0%}{extra}")


if __name__ == "__main__":
    main()
