"""``tlm demo``: the whole pipeline on this machine, end to end, on embedded defaults.

    tlm demo [--workdir DIR] [--model resnet50] [--trials 16] [--full-size]

What it does, each step with real parts (local Ray, SQLite index, local Parquet corpus):

1. detect this machine's hardware key and TVM target;
2. extract the model's tasks (torch.export → Relax → fused PrimFuncs) and collect a measured
   corpus with MetaSchedule inside Ray collector actors (every candidate measured and
   correctness-checked; resumable: running the demo again skips what is done);
3. print the corpus statistics and verify every Parquet part's checksum;
4. export the best record per task as a MetaSchedule database, compile the *whole model* with
   it, check the output against PyTorch, and time it against PyTorch eager and against the
   untuned TVM build, in this one process;
5. write each task's best schedule as a tensor-language sentence, decode it back and check the
   decisions are the same; then write a valid program by a constrained random walk through the
   legal words only and check it computes the right answer;
6. build the pretraining / fine-tuning sentence sets from the corpus.

The default (small ResNet-50 variant, 32x32 images, its 6 heaviest tasks, 16 trials per task)
takes a few minutes on 2 cores; ``--full-size`` uses the 224x224 model. Timings of a tiny model
are dominated by per-operator overhead (PyTorch eager most of all): read them as a check that
the pipeline works, and use ``bench/`` for performance figures.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="run the whole pipeline on this machine (the main job)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default="work/demo", help="where the corpus and outputs go (default work/demo)")
    p.add_argument("--model", default="resnet50", help="zoo model (default resnet50)")
    p.add_argument("--trials", type=int, default=16, help="measured candidates per task (default 16)")
    p.add_argument("--strategy", choices=("evolutionary", "replay-trace"), default="evolutionary")
    p.add_argument("--tasks", type=int, default=6, metavar="N",
                   help="tune the N heaviest tasks (default 6; 0 = all); the rest keep TVM's default schedule")
    p.add_argument("--full-size", action="store_true", help="the real model size instead of the small variant")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run_demo)


def _step(n: int, text: str) -> None:
    print(f"\n== {n}. {text}", flush=True)


def run_demo(args: argparse.Namespace) -> int:
    from collectors.hardware import detect_hardware
    from collectors.tuner import TuneConfig
    from cluster.collect_job import JobConfig, run_collection
    from collectors.tasks import tasks_for_models
    from storage import Corpus

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    t_start = time.perf_counter()
    work = Path(args.workdir)
    corpus_dir = work / "corpus"
    work.mkdir(parents=True, exist_ok=True)
    zoo = {"small": not args.full_size, "seed": args.seed}
    report: dict[str, Any] = {"model": args.model, "small": not args.full_size, "trials": args.trials}

    _step(1, "hardware")
    hw = detect_hardware("cpu")
    print(f"{hw.key}: {hw.description}; target {json.dumps(hw.target)}")
    report["hardware"] = hw.key

    _step(2, f"collect {args.model} ({'small' if zoo['small'] else 'full size'}), {args.trials} trials/task, on Ray")
    tasks = tasks_for_models([args.model], hw, max_tasks=args.tasks or None, **zoo)
    print(f"{len(tasks)} task(s) extracted")
    config = TuneConfig(trials=args.trials, strategy=args.strategy, seed=args.seed,
                        trials_per_iter=min(args.trials, 64))
    summary = run_collection(tasks, corpus_root=str(corpus_dir), tune_config=config, hardware_keys=[hw.key],
                             config=JobConfig(), params={"model": args.model, "demo": True})
    report["collection"] = summary.as_dict()
    print(f"collection {summary.status}: {summary.count('done')} tuned, {summary.count('skipped')} already done, "
          f"{summary.count('failed')} failed, {summary.records} new records in {summary.wall_s:.0f} s")

    with Corpus.open(str(corpus_dir)) as corpus:
        _step(3, "corpus")
        st = corpus.stats()
        print(f"{st['records']} records ({st['ok']} measured, {st['errors']} errors) in {st['parts']} Parquet parts")
        vr = corpus.verify()
        print("verify:", "ok" if vr.ok else "; ".join(vr.lines()))
        report["corpus"] = {k: st[k] for k in ("records", "ok", "errors", "parts")}

        _step(4, "compile the whole model with the best schedules; compare with PyTorch")
        report["end_to_end"] = _end_to_end(corpus, hw, args.model, zoo, work)

        _step(5, "tensor language: best schedules as sentences, and a constrained walk")
        report["language"] = _language(corpus, hw, tasks, args.seed)

        _step(6, "training sentence sets")
        report["dataset"] = _dataset(corpus, work)

    report["wall_s"] = round(time.perf_counter() - t_start, 1)
    (work / "demo.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\ndone in {report['wall_s']} s; report in {work / 'demo.json'}")
    return 0 if summary.status == "done" and report["end_to_end"].get("max_abs_err") is not None else 1


def _end_to_end(corpus: Any, hw: Any, model: str, zoo: dict, work: Path) -> dict:
    import numpy as np
    from tvm.s_tir import meta_schedule as ms

    from collectors.compile import compile_model, run_model, time_model, time_torch, torch_output
    from collectors.ms_database import export_ms
    from collectors.tasks import import_relax
    from collectors.zoo import build_model

    db_dir = work / "best-db"
    rep = export_ms(corpus, str(db_dir), hardware_key=hw.key, best_only=True, overwrite=True)
    print(f"exported {rep.records} best record(s) to {db_dir}")
    module, args = build_model(model, **zoo)
    mod = import_relax(module, args)
    tuned = compile_model(mod, hw, ms.database.JSONDatabase(work_dir=str(db_dir)))
    untuned = compile_model(mod, hw)
    got, want = run_model(tuned, args, hw), torch_output(module, args)
    err = float(np.max(np.abs(got - want)))
    ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-4))
    t_tuned = time_model(tuned, args, hw)
    t_untuned = time_model(untuned, args, hw)
    t_torch = time_torch(module, args, threads=hw.cores)
    print(f"output vs PyTorch: max abs err {err:.2e} ({'ok' if ok else 'MISMATCH'})")
    print(f"latency: tuned TVM {t_tuned * 1e3:.3f} ms | untuned TVM {t_untuned * 1e3:.3f} ms | "
          f"PyTorch eager {t_torch * 1e3:.3f} ms  -> tuned is {t_untuned / t_tuned:.1f}x faster than untuned, "
          f"{t_torch / t_tuned:.2f}x PyTorch eager")
    return {"records_exported": rep.records, "max_abs_err": err if ok else None, "tuned_ms": t_tuned * 1e3,
            "untuned_ms": t_untuned * 1e3, "torch_eager_ms": t_torch * 1e3,
            "speedup_vs_untuned": t_untuned / t_tuned, "speedup_vs_torch": t_torch / t_tuned}


def _language(corpus: Any, hw: Any, tasks: list, seed: int) -> dict:
    from tlm.constrained import apply_sentence
    from tlm.language import decode, encode, legal_next_tokens
    from collectors.correctness import check_schedule, make_reference

    out: dict[str, Any] = {"round_trips": 0, "sentences": 0}
    prompts: dict[str, tuple] = {}  # workload key -> prompt of its best schedule's sketch
    shown = False
    for task in tasks:
        best = corpus.top_k(task.workload_key, hw.key, 1).to_pylist()
        if not best:
            continue
        sentence = encode(task, hw, best[0]["trace_json"])
        prompts[task.workload_key] = sentence.prompt
        out["sentences"] += 1
        out["round_trips"] += int(_same_program(task.mod, best[0]["trace_json"], decode(sentence, task, hw)))
        if not shown:
            words = sentence.tokens
            print(f"{task.task_name}: {len(words)} words, prompt {sentence.prompt_len}")
            print("  prompt ...", " ".join(words[max(0, sentence.prompt_len - 24):sentence.prompt_len]))
            print("  decisions:", " ".join(sentence.decisions))
            shown = True
    print(f"{out['round_trips']}/{out['sentences']} best schedules round-trip exactly (sentence -> trace)")

    # A constrained random walk: only legal words, so the program is valid by construction.
    rng = random.Random(seed)
    task = max(tasks, key=lambda t: t.flops * t.weight)
    if task.workload_key in prompts:
        words = list(prompts[task.workload_key])
        steps = 0
        while words[-1] != "[EOS]":
            legal = sorted(legal_next_tokens(words, task, hw))
            words.append(rng.choice(legal))
            steps += 1
        program = apply_sentence(words, task, hw)
        err = check_schedule(program.schedule, make_reference(task.mod, seed=seed), hw.tvm_target())
        print(f"random legal walk on {task.task_name}: {steps} words -> "
              f"{'valid program, right answer' if err is None else 'ERROR: ' + err}")
        out["walk"] = {"task": task.task_name, "words": steps, "error": err}
    return out


def _same_program(mod: Any, trace_json: str, decoded: Any) -> bool:
    """Whether the record's trace and the decoded trace schedule ``mod`` into the same program
    (both replayed without postprocessing, compared structurally)."""
    import tvm_ffi
    from tvm.s_tir.schedule import Schedule, Trace

    loaded = Schedule(mod)
    Trace.apply_json_to_schedule(json.loads(trace_json), loaded)
    a, b = Schedule(mod), Schedule(mod)
    loaded.trace.apply_to_schedule(a, remove_postproc=True)
    decoded.apply_to_schedule(b, remove_postproc=True)
    return bool(tvm_ffi.structural_equal(a.mod, b.mod))


def _dataset(corpus: Any, work: Path) -> dict:
    from tlm.dataset import DatasetConfig, build_datasets

    out = work / f"dataset-{int(time.time())}"
    s = build_datasets(corpus, str(out), DatasetConfig(pretrain_per_sketch=2, finetune_top_k=2), progress=False)
    print(f"{s.pretrain_rows} pretraining and {s.finetune_rows} fine-tuning sentences in {out}")
    return {"pretrain": s.pretrain_rows, "finetune": s.finetune_rows, "dir": os.fspath(out)}
