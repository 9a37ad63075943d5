"""How good is the teacher, round after round (issue 32, items 3-4): the corpus's best programs on
a fixed sample of training workloads against MetaSchedule@256 on the same workloads.

    .venv/bin/python -m bench.references --set train --tasks 16 --trials 256   # the references, once
    .venv/bin/python -m bench.learning teacher --round 0 [--corpus data/corpus] [--tasks 16]

The sample is ``bench.judging.training_sample`` (16 searched training workloads the corpus
measured on this key, in workload-key order); MetaSchedule@256 is ``bench.references``'s cached
search of each (a workload without one is refused: search it first). Per workload, in one
measurement call (``collectors.judge``: checked, 3 x 3 runs, median): the corpus's fastest
record on this key (the teacher's best program: what a fine-tune imitates), MetaSchedule@64
and @256 from the reference search, and the rule baseline. The teacher's figure is the geomean
of MS@256 / corpus best (1.0: as good as a 256-trial search); its pool health (the failure modes
of its 64 fastest records per workload, ``bench.quality.teacher_modes``) is stored beside.

``student --model DIR`` judges a model on the same training sample (fit before generalization):
its greedy and ranked top-1 (ranked by ``tlm.service.catalog.ranker_for``) against the teacher's
best program and MetaSchedule@256, in ``student_train``.

``coverage --sets DIR --base MODEL`` is the learning curve of item 5: the same fine-tune recipe on
nested subsets of the training workloads of a sentence set (a quarter, a half: the workloads in the
order of a hash of their key), each student judged on the held-out workloads as ``student --set
heldout`` judges; the full set's point is the ``student_heldout`` entry of ``--full-round``:

    .venv/bin/python -m bench.learning coverage --sets work/ei/sets-r1 --base models/tlm-small-pretrain \
        --corpus work/ei/corpus --full-round 1 --tasks 8

Writes ``bench/results/learning.json`` (``teacher`` and ``student_train`` keyed by hardware key
and round; ``student_heldout`` and ``coverage_curve`` join it as those rounds run) and its
Markdown; a round measured again replaces its entry, other rounds are kept.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench._common import RESULTS, failed_measurements, machine, refuse_beside_measuring, speed_over

OUT = os.path.join(RESULTS, "learning.json")


def _sample(hardware: Any, corpus_dir: str | None, n: int) -> tuple[list, dict]:
    """The fixed (pinned) training sample and the corpus's fastest record of each of its workloads."""
    from bench.judging import CORPUS, training_sample
    from storage import Corpus

    tasks = training_sample(hardware.key, corpus_dir=corpus_dir, n=n)
    with Corpus.open(corpus_dir or CORPUS) as corpus:
        return tasks, corpus.best_records([t.workload_key for t in tasks], hardware.key)


def _judged(task: Any, hardware: Any, methods: dict) -> dict:
    """One workload's methods re-measured in one call: its row (``latency_s`` per method; ``errors``:
    the first error of each method that timed no correct program, which every ratio then leaves
    out), printed."""
    from collectors import judge

    res = judge.judge(task, hardware, methods, torch_eager=False)
    lat = {k: v["latency_s"] for k, v in res.items() if v.get("latency_s")}
    errors = {k: (v.get("errors") or ["no latency"])[0] for k, v in res.items() if k not in lat}
    print(task.task_name, {k: f"{v * 1e6:.0f} us" for k, v in lat.items()},
          *(f"{k} failed: {e}" for k, e in errors.items()), flush=True)
    return {"task": task.task_name, "workload_key": task.workload_key, "latency_s": lat, "errors": errors}


def teacher(hardware: Any, *, corpus_dir: str | None, n: int, trials: int = 256) -> dict:
    """The teacher's figure on the training sample (module docstring)."""
    from bench.quality import health_of, teacher_modes
    from bench.references import cache_path, reference_search
    from collectors.judge import Method, rules_method
    from collectors.tir import schedule_of

    tasks, best = _sample(hardware, corpus_dir, n)
    missing = [t.task_name for t in tasks if not os.path.exists(cache_path(t.workload_key, hardware.key, trials, 0))]
    if missing:
        raise SystemExit(f"error: no MetaSchedule@{trials} reference of {', '.join(missing)} on {hardware.key}: "
                         f"run python -m bench.references --set train --tasks {n} --trials {trials} first")
    rows = []
    for t in tasks:
        methods = {"corpus_best": Method([schedule_of(t.mod, best[t.workload_key]["trace_json"])], 0.0),
                   "rules": rules_method(t, hardware), **reference_search(t, hardware, trials).methods}
        rows.append({**_judged(t, hardware, methods), "model": t.model,
                     "corpus_best_recorded_s": best[t.workload_key]["latency_s"],
                     "corpus_best_tuner": best[t.workload_key]["tuner"]})
    ms = f"ms_{trials}"
    modes = teacher_modes(hardware.key, hardware, corpus_dir=corpus_dir, n=n)
    return {"workloads": len(rows), "tasks": rows, "failed": failed_measurements(rows),
            "corpus_best_vs_ms_256": speed_over(rows, "corpus_best", ms),
            "ms_64_vs_ms_256": speed_over(rows, "ms_64", ms), "rules_vs_ms_256": speed_over(rows, "rules", ms),
            "corpus_best_vs_rules": speed_over(rows, "corpus_best", "rules"),
            "pool_health": health_of([p["modes"] for p in modes["programs"]], [p["speed"] for p in modes["programs"]])}


def heldout_sample(hardware: Any, corpus_dir: str | None, n: int) -> tuple[list, dict]:
    """The ``n`` heaviest held-out workloads (``bench.judging.judging_set``: models never trained on)
    of a searched kind that the corpus measured on this key, and their fastest records: the student
    generalizing, judged against the same kind of teacher (the corpus's best, a 64-trial search) as
    on its training workloads. Rounds collect training workloads only, so the sample stays put."""
    from bench.judging import CORPUS, SEARCHED_KINDS, judging_set
    from storage import Corpus

    tasks = [t for t in judging_set(hardware, corpus_dir=corpus_dir, outside=False) if t.op_kind in SEARCHED_KINDS]
    with Corpus.open(corpus_dir or CORPUS) as corpus:
        best = corpus.best_records([t.workload_key for t in tasks], hardware.key)
    return [t for t in tasks if t.workload_key in best][:n], best


def student(hardware: Any, model_dir: str, *, corpus_dir: str | None, n: int, trials: int = 256,
            heldout: bool = False) -> dict:
    """The student on its *training* workloads (fit before generalization), or with ``heldout`` on
    held-out ones (:func:`heldout_sample`): the model's greedy and ranked top-1, re-measured beside
    the teacher's best program (the corpus's fastest record) and MetaSchedule@256 (on held-out
    workloads only where its search is cached), in one call per workload."""
    from bench.references import cache_path, reference_search
    from collectors.failure_modes import modes_of_schedule
    from collectors.judge import Method
    from collectors.tir import schedule_of
    from tlm.language import encode
    from tlm.model.network import load_model
    from tlm.service.catalog import ranker_for
    from tlm.service.generator import generate

    model, tok, _ = load_model(model_dir)
    ranker, ranked_by = ranker_for(model_dir, hardware.key)
    tasks, best = heldout_sample(hardware, corpus_dir, n) if heldout else _sample(hardware, corpus_dir, n)
    ms = f"ms_{trials}"
    rows = []
    for t in tasks:
        g = generate(t, hardware, model, tok, k=1)
        methods = {"tlm_top1": Method([g.candidates[0].schedule], g.generate_s + g.check_s),
                   "corpus_best": Method([schedule_of(t.mod, best[t.workload_key]["trace_json"])], 0.0)}
        if not heldout or os.path.exists(cache_path(t.workload_key, hardware.key, trials, 0)):
            methods[ms] = reference_search(t, hardware, trials).methods[ms]
        if ranker is not None:
            gr = generate(t, hardware, model, tok, k=1, ranker=ranker)
            methods["tlm_ranked_top1"] = Method([gr.candidates[0].schedule], gr.generate_s + gr.check_s + gr.rank_s)
        row = _judged(t, hardware, methods)
        # look at the programs: their static failure modes, and whether the greedy one is the teacher's
        row["modes"] = {m: list(modes_of_schedule(methods[m].schedules[0], hardware)) for m in
                        ("tlm_top1", "tlm_ranked_top1", "corpus_best") if m in methods}
        teacher = encode(t, hardware, best[t.workload_key]["trace_json"])
        top1 = g.candidates[0]
        row["top1_is_teacher"] = top1.sketch_id == teacher.sketch_id and tuple(top1.decisions) == tuple(teacher.decisions)
        rows.append(row)
    in_mode = [bool(r["modes"]["tlm_top1"]) for r in rows]
    return {"model": os.path.basename(os.path.normpath(model_dir)), "ranked_by": ranked_by, "workloads": len(rows),
            "tasks": rows, "failed": failed_measurements(rows), "top1_in_a_failure_mode": sum(in_mode) / max(1, len(in_mode)),
            "top1_is_teacher": sum(r["top1_is_teacher"] for r in rows),
            "top1_vs_teacher": speed_over(rows, "tlm_top1", "corpus_best"),
            "ranked_top1_vs_teacher": speed_over(rows, "tlm_ranked_top1", "corpus_best"),
            "top1_vs_ms_256": speed_over(rows, "tlm_top1", ms),
            "ranked_top1_vs_ms_256": speed_over(rows, "tlm_ranked_top1", ms)}


def subset_sets(sets_dir: str, fraction: float, out_dir: str) -> dict:
    """``sets_dir``'s fine-tuning set with only ``fraction`` of its training workloads (the first
    of them by a hash of the workload key, so a smaller subset is inside a larger one; the test
    split whole), written to ``out_dir`` with the same metadata. Its sizes."""
    import hashlib

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tlm.model.dataset import FINETUNE_FILE

    table = pq.read_table(os.path.join(sets_dir, FINETUNE_FILE))
    train = sorted({w for w, s in zip(table["workload_key"].to_pylist(), table["split"].to_pylist()) if s == "train"},
                   key=lambda w: hashlib.sha256(w.encode()).hexdigest())
    keep = set(train[: max(1, round(fraction * len(train)))])
    sub = table.filter(pc.or_(pc.equal(table["split"], "test"),
                              pc.is_in(table["workload_key"], value_set=pa.array(sorted(keep)))))
    os.makedirs(out_dir, exist_ok=True)
    pq.write_table(sub, os.path.join(out_dir, FINETUNE_FILE))
    return {"fraction": fraction, "train_workloads": len(keep), "of_train_workloads": len(train),
            "rows": sum(1 for s in sub["split"].to_pylist() if s == "train")}


def coverage(hardware: Any, sets_dir: str, base: str, fractions: list[float], *, corpus_dir: str | None, n: int,
             work: str, epochs: float, lr: float) -> list[dict]:
    """The held-out student of each fraction of the training workloads (module docstring); a
    subset's model already trained under ``work`` is judged again, not retrained."""
    import subprocess
    import sys

    points = []
    for frac in fractions:
        name = f"coverage-{round(frac * 100)}"
        sub = subset_sets(sets_dir, frac, os.path.join(work, "sets", name))
        model_dir = os.path.join(work, "models", name)
        if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
            cmd = [sys.executable, "-m", "cluster.cli", "train", "--stage", "finetune", "--hardware", hardware.key,
                   "--base", base, "--dataset", os.path.join(work, "sets", name),
                   "--workers", "2", "--out", os.path.join(work, "models"), "--name", name, "--no-register",
                   "--eval-every", "100000", "--epochs", str(epochs), "--lr", str(lr)]
            print(f"== {name}: {sub['train_workloads']} of {sub['of_train_workloads']} training workloads, "
                  f"{sub['rows']} rows", flush=True)
            subprocess.run(cmd, check=True, env=os.environ | {"RAY_USAGE_STATS_ENABLED": "0"})
        refuse_beside_measuring("judge a coverage point")
        points.append(sub | student(hardware, model_dir, corpus_dir=corpus_dir, n=n, heldout=True))
    return points


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("teacher", "student", "coverage"))
    ap.add_argument("--round", type=int, default=0, help="the expert-iteration round the corpus (or model) is at")
    ap.add_argument("--model", default=None, help="student: the model directory")
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--set", choices=("train", "heldout"), default="train",
                    help="student: its training sample (student_train) or held-out workloads (student_heldout)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--if-missing", action="store_true",
                    help="judge only when --out has no entry of this round on this key yet (a resumed round)")
    ap.add_argument("--sets", help="coverage: the sentence set whose training workloads are subset")
    ap.add_argument("--base", default="models/tlm-small-pretrain", help="coverage: the base model each subset fine-tunes")
    ap.add_argument("--fractions", default="0.25,0.5", help="coverage: fractions of the training workloads")
    ap.add_argument("--full-round", type=int, default=None,
                    help="coverage: the round whose student_heldout entry is the full set's point")
    ap.add_argument("--epochs", type=float, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--work", default="work/coverage", help="coverage: where subsets and their models go")
    args = ap.parse_args()
    if args.what == "student" and not args.model:
        ap.error("student needs --model DIR")
    if args.what == "coverage" and not args.sets:
        ap.error("coverage needs --sets DIR")

    from bench.judging import pin_sample, training_sample
    from collectors.hardware import detect_hardware

    hw = detect_hardware("cpu")
    res = json.load(open(args.out)) if os.path.exists(args.out) else {}
    if args.what == "coverage":
        points = coverage(hw, args.sets, args.base, [float(x) for x in args.fractions.split(",")],
                          corpus_dir=args.corpus, n=args.tasks, work=args.work, epochs=args.epochs, lr=args.lr)
        full = res.get("student_heldout", {}).get(hw.key, {}).get(str(args.full_round))
        if full is not None:
            points.append({"fraction": 1.0, "round": args.full_round} | full)
        res.setdefault("coverage_curve", {})[hw.key] = {"sets": args.sets, "base": args.base, "epochs": args.epochs,
                                                        "lr": args.lr, "machine": machine(hw), "points": points}
        _write(res, args.out)
        return
    section = "teacher" if args.what == "teacher" else f"student_{args.set}"
    if args.if_missing and str(args.round) in res.get(section, {}).get(hw.key, {}):
        print(f"{section} of round {args.round} on {hw.key} is in {args.out} already: not judged again")
        return
    refuse_beside_measuring(f"judge the {args.what}")
    t0 = time.time()
    if args.what == "teacher":
        entry = teacher(hw, corpus_dir=args.corpus, n=args.tasks)
        pin_sample(hw.key, training_sample(hw.key, corpus_dir=args.corpus, n=args.tasks))
    else:
        entry = student(hw, args.model, corpus_dir=args.corpus, n=args.tasks, heldout=args.set == "heldout")
    entry.update(machine=machine(hw), wall_s=round(time.time() - t0), corpus=args.corpus or "data/corpus")
    res.setdefault(section, {}).setdefault(hw.key, {})[str(args.round)] = entry
    _write(res, args.out)


def _write(res: dict, out: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(report_md(res))
    print(report_md(res))


def report_md(res: dict) -> str:
    lines = ["# Learning: the teacher and the student, round by round (issue 32)", "",
             "Teacher = the corpus's fastest record per workload on a fixed sample of training workloads "
             "(`bench.judging.training_sample`), re-measured beside MetaSchedule@64/@256 (`bench.references`) and "
             "the rules in one call per workload. Speeds are geomeans of MS@256 latency / the method's.", "",
             "| key | round | workloads | corpus best vs MS@256 | MS@64 vs MS@256 | rules vs MS@256 | "
             "teacher programs in a failure mode |", "|---|---:|---:|---:|---:|---:|---:|"]
    f = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
    # a method that timed no correct program on a workload is left out of that workload's ratios
    w = lambda e: f"{e['workloads']}" + "".join(f", {m} failed on {n}" for m, n in e.get("failed", {}).items())  # noqa: E731
    for key, rounds in res.get("teacher", {}).items():
        for rnd, e in sorted(rounds.items(), key=lambda kv: int(kv[0])):
            lines.append(f"| {key} | {rnd} | {w(e)} | {f(e['corpus_best_vs_ms_256'])} | "
                         f"{f(e['ms_64_vs_ms_256'])} | {f(e['rules_vs_ms_256'])} | {e['pool_health']['any']:.0%} |")
    for section, what in (("student_train", "on its training workloads (the same sample; fit before generalization)"),
                          ("student_heldout", "on held-out workloads (the heaviest the corpus measured; MS@256 where "
                                              "its search is cached)")):
        if not res.get(section):
            continue
        lines += ["", f"The student {what}:", "",
                  "| key | round | workloads | model (ranked by) | top-1 vs teacher | ranked top-1 vs teacher | "
                  "top-1 vs MS@256 | ranked top-1 vs MS@256 | top-1 in a failure mode | top-1 = teacher's program |",
                  "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
        for key, rounds in res[section].items():
            for rnd, e in sorted(rounds.items(), key=lambda kv: int(kv[0])):
                lines.append(f"| {key} | {rnd} | {w(e)} | {e['model']} ({e['ranked_by']}) | "
                             f"{f(e['top1_vs_teacher'])} | {f(e['ranked_top1_vs_teacher'])} | "
                             f"{f(e['top1_vs_ms_256'])} | {f(e['ranked_top1_vs_ms_256'])} | "
                             + ("-" if "top1_in_a_failure_mode" not in e else f"{e['top1_in_a_failure_mode']:.0%}")
                             + f" | {e.get('top1_is_teacher', '-')} of {e['workloads']} |")
    for key, curve in res.get("coverage_curve", {}).items():
        lines += ["", f"Coverage (item 5): the held-out student against the training workloads it learnt from "
                      f"({key}; {curve['epochs']:g} epochs, lr {curve['lr']:g}, from {curve['base']}):", "",
                  "| training workloads | rows | top-1 vs teacher | ranked top-1 vs teacher | top-1 in a failure mode |",
                  "|---:|---:|---:|---:|---:|"]
        for p in sorted(curve["points"], key=lambda p: p["fraction"]):
            count = f"{p['train_workloads']} ({p['fraction']:.0%})" if "train_workloads" in p else "all"
            lines.append(f"| {count} | {p.get('rows', '-')} | {f(p['top1_vs_teacher'])} | "
                         f"{f(p['ranked_top1_vs_teacher'])} | "
                         + ("-" if "top1_in_a_failure_mode" not in p else f"{p['top1_in_a_failure_mode']:.0%}") + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
