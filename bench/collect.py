"""Benchmark of collection on one node: our tune_task path vs plain ``ms.tune_tir``.

For a fixed task set (the heaviest tasks of ResNet-50 and BERT-base at batch 1), each task is
tuned twice in the same run with the same trials, seed, strategy, builder and runner settings:
once through ``collectors.tuner.tune_task`` (records streamed into a Parquet corpus, sketch
ids, per-candidate correctness check) and once with plain ``ms.tune_tir``. The order
alternates per task so that drift on a shared machine does not favour one side. Reported:
measured records per second per core of both, our overhead, per-task tuning time, the best
latency found, and PyTorch eager on the same operator where the task maps to a PyTorch call
(found by trying candidate calls and keeping the one whose output equals the task's reference
output on random inputs; otherwise the reason is stated).

    .venv/bin/python -m bench.collect [--trials 8] [--tasks-per-model 2] [--reps 2] [--out bench/results/collect.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

logger = logging.getLogger("bench.collect")


def torch_equivalent(task: Any, ref: Any) -> tuple[Any, str]:
    """(callable on torch tensors, description) computing the task's output, or (None, reason).

    Candidates are tried on the reference inputs; one is accepted only if it reproduces the
    reference output (the unscheduled PrimFunc's) to float tolerance.
    """
    import torch
    import torch.nn.functional as F

    from collectors.correctness import compare

    ins = [torch.from_numpy(a.copy()) for a in ref.inputs[:-1]]
    expected = ref.outputs[-1]
    cands: list[tuple[str, Any]] = []
    if task.op_kind == "matmul":
        if len(ins) >= 2:
            cands += [("a @ b", lambda a, b, *r: a @ b), ("a @ b.T", lambda a, b, *r: a @ b.transpose(-1, -2))]
        if len(ins) == 3:
            cands += [("a @ b + c", lambda a, b, c: a @ b + c), ("a @ b.T + c", lambda a, b, c: a @ b.transpose(-1, -2) + c)]
        if len(ins) == 3 and "gelu" in task.task_name:
            cands += [("gelu(a @ b + c)", lambda a, b, c: F.gelu(a @ b + c))]
    elif task.op_kind == "conv2d" and len(ins) == 2 and ins[0].dim() == 4 and ins[1].dim() == 4:
        for stride in (1, 2):
            for pad in range(0, 4):
                cands.append((f"conv2d(stride={stride}, padding={pad})",
                              lambda x, w, s=stride, p=pad: F.conv2d(x, w, stride=s, padding=p)))
    else:
        return None, f"no PyTorch mapping tried for op kind {task.op_kind!r}"
    for desc, fn in cands:
        try:
            with torch.no_grad():
                got = fn(*ins)
        except Exception:  # noqa: BLE001 - a candidate of the wrong shape
            continue
        if tuple(got.shape) == expected.shape and compare([got.numpy()], [expected]) is None:
            return fn, desc
    return None, "no candidate PyTorch call reproduced the task's output"


def run_tune_tir(task: Any, hardware: Any, trials: int, trials_per_iter: int, seed: int) -> dict:
    """Plain MetaSchedule on one task with the same builder/runner settings as ours."""
    from tvm.s_tir import meta_schedule as ms

    from collectors.fast_import import install

    cfg = _our_config(trials, trials_per_iter, seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tune-tir-") as work_dir:
        db = ms.tune_tir(
            task.mod, hardware.tvm_target(), work_dir, trials, num_trials_per_iter=min(trials_per_iter, trials),
            builder=ms.builder.LocalBuilder(max_workers=hardware.cores, timeout_sec=cfg.build_timeout_s,
                                            initializer=install),
            runner=ms.runner.LocalRunner(timeout_sec=cfg.run_timeout_s, initializer=install,
                                         evaluator_config=ms.runner.EvaluatorConfig(
                                             number=cfg.number, repeat=cfg.repeat, min_repeat_ms=cfg.min_repeat_ms,
                                             enable_cpu_cache_flush=False)),
            cost_model="xgb", strategy="evolutionary", seed=seed, num_tuning_cores=hardware.cores,
        )
        recs = db.get_all_tuning_records()
        lat = [statistics.median([float(x) for x in r.run_secs]) for r in recs
               if r.run_secs is not None and len(r.run_secs) and all(float(x) < 1e9 for x in r.run_secs)]
    return {"elapsed_s": time.perf_counter() - t0, "records": len(recs),
            "best_latency_s": min(lat) if lat else None}


def overhead_components(task: Any, hardware: Any, traces: list[str], seed: int, append_s: float,
                        records: int, runs: int) -> dict:
    """Time the work our path adds to MetaSchedule's, piece by piece (far less noisy than
    end-to-end times on a shared machine): the reference run, one correctness check per
    candidate (one extra run + comparison), and the corpus appends."""
    import tvm
    from tvm.s_tir.schedule import Schedule, Trace

    from collectors.correctness import compare, make_reference

    t = time.perf_counter()
    ref = make_reference(task.mod, seed=seed)
    ref_s = time.perf_counter() - t
    check_s = None
    if traces:
        sch = Schedule(task.mod)
        Trace.apply_json_to_schedule(json.loads(traces[0]), sch)
        ex = tvm.compile(sch.mod, target=hardware.tvm_target())
        dev = tvm.cpu(0)
        ex["main"](*[tvm.runtime.tensor(a, device=dev) for a in ref.inputs])  # warm-up
        reps = []
        for _ in range(5):
            t = time.perf_counter()
            args = [tvm.runtime.tensor(a, device=dev) for a in ref.inputs]
            ex["main"](*args)
            err = compare([a.numpy() for a in args], ref.outputs)
            reps.append(time.perf_counter() - t)
        assert err is None, err
        check_s = statistics.median(reps)
    total = runs * ref_s + records * (check_s or 0.0) + append_s
    return {"reference_s": ref_s, "check_per_candidate_s": check_s, "append_s_total": append_s, "total_s": total}


def _our_config(trials: int, trials_per_iter: int, seed: int):
    from collectors.tuner import TuneConfig

    return TuneConfig(trials=trials, strategy="evolutionary", seed=seed, trials_per_iter=trials_per_iter)


def run_ours(task: Any, hardware: Any, corpus: Any, trials: int, trials_per_iter: int, seed: int) -> dict:
    from collectors.tuner import tune_task

    stored = 0
    append_s = 0.0
    traces: list[str] = []

    def flush(records: list) -> None:
        nonlocal stored, append_s
        t = time.perf_counter()
        stored += corpus.append(records).rows
        append_s += time.perf_counter() - t
        traces.extend(r.trace_json for r in records if r.error is None)

    t0 = time.perf_counter()
    s = tune_task(task, hardware, _our_config(trials, trials_per_iter, seed), on_records=flush, run_id="bench")
    out = {"elapsed_s": time.perf_counter() - t0, "records": s.records, "stored": stored, "errors": s.errors,
           "wrong_answers": s.wrong_answers, "best_latency_s": s.best_latency_s, "sketches": s.sketches,
           "append_s": append_s, "ok_traces": traces}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=8, help="trials per task for both paths")
    p.add_argument("--trials-per-iter", type=int, default=16, help="candidates per measured batch")
    p.add_argument("--tasks-per-model", type=int, default=2, help="heaviest N tasks of each model")
    p.add_argument("--models", default="resnet50,bert_base", help="zoo models (batch 1, full size)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=2, choices=(1, 2), help="runs of each path per task (2: A-B-B-A)")
    p.add_argument("--out", default="bench/results/collect.json")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)

    import collectors.fast_import as fast_import

    fast_import.install()
    import torch
    import tvm

    from collectors.compile import time_torch
    from collectors.correctness import make_reference
    from collectors.hardware import detect_hardware
    from collectors.tasks import extract_tasks
    from storage import Corpus

    hw = detect_hardware("cpu")
    tasks = []
    for model in args.models.split(","):
        ts = extract_tasks(model, hw, batch=1)
        tasks += ts[: args.tasks_per_model]
    logger.info("tasks: %s", [(t.model, t.task_name) for t in tasks])
    rows = []
    # Untimed warm-up of both paths (first-use costs: xgboost import, LLVM init, pools).
    from collectors.tasks import Task
    from collectors.workloads import matmul

    with tempfile.TemporaryDirectory(prefix="bench-warmup-") as warm_dir:
        warm = Task("0" * 16, "warmup", matmul(32, 32, 32))
        run_ours(warm, hw, Corpus.open(warm_dir), 2, 2, args.seed)
        run_tune_tir(warm, hw, 2, 2, args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as corpus_dir:
        corpus = Corpus.open(corpus_dir)
        corpus.register_hardware(hw.key, target=hw.target, description=hw.description)
        for i, task in enumerate(tasks):
            logger.info("[%d/%d] %s %s (%.1f MFLOP x %d)", i + 1, len(tasks), task.model, task.task_name,
                        task.flops / 1e6, task.weight)
            # A-B-B-A order (B-A-A-B on odd tasks): linear drift of a shared machine cancels.
            order = ["ours", "tir", "tir", "ours"] if i % 2 == 0 else ["tir", "ours", "ours", "tir"]
            runs: dict[str, list[dict]] = {"ours": [], "tir": []}
            for which in order[: 2 * args.reps]:
                if which == "ours":
                    runs["ours"].append(run_ours(task, hw, corpus, args.trials, args.trials_per_iter, args.seed))
                else:
                    runs["tir"].append(run_tune_tir(task, hw, args.trials, args.trials_per_iter, args.seed))
            ok_traces = [t for r in runs["ours"] for t in r.pop("ok_traces")]
            ours, plain = _merge(runs["ours"]), _merge(runs["tir"])
            ours["components"] = overhead_components(task, hw, ok_traces[:1], args.seed,
                                                     sum(r["append_s"] for r in runs["ours"]),
                                                     ours["records"], len(runs["ours"]))
            ref = make_reference(task.mod, seed=args.seed)
            fn, desc = torch_equivalent(task, ref)
            # PyTorch gets its best thread count: OpenMP with all cores can lose badly on a
            # loaded machine, one thread sometimes wins.
            ins = [torch.from_numpy(a.copy()) for a in ref.inputs[:-1]] if fn is not None else []
            eager_by_threads = ({n: time_torch(fn, ins, threads=n, warmup=3, runs=20) for n in sorted({1, hw.cores})}
                                if fn is not None else {})
            eager = min(eager_by_threads.values()) if eager_by_threads else None
            row = {"model": task.model, "task": task.task_name, "workload_key": task.workload_key,
                   "op_kind": task.op_kind, "mflop": task.flops / 1e6, "weight": task.weight,
                   "ours": ours, "tune_tir": plain,
                   "pytorch_eager": {"latency_s": eager, "by_threads": eager_by_threads,
                                     "call": desc if fn is not None else None,
                                     "note": None if fn is not None else desc}}
            if ours["best_latency_s"] and eager:
                row["best_vs_eager_speedup"] = eager / ours["best_latency_s"]
            rows.append(row)
            logger.info("  ours %.1f s (%d rec), tune_tir %.1f s (%d rec), best %s us, eager %s us",
                        ours["elapsed_s"], ours["records"], plain["elapsed_s"], plain["records"],
                        _us(ours["best_latency_s"]), _us(eager))
        stats = corpus.stats()
    ours_t = sum(r["ours"]["elapsed_s"] for r in rows)
    tir_t = sum(r["tune_tir"]["elapsed_s"] for r in rows)
    ours_n = sum(r["ours"]["records"] for r in rows)
    tir_n = sum(r["tune_tir"]["records"] for r in rows)
    result = {
        "what": "measured records per second per core: tune_task (ours) vs plain ms.tune_tir, same trials",
        "command": "python -m bench.collect " + " ".join(argv if argv is not None else sys.argv[1:]),
        "hardware": asdict(hw), "tvm_version": str(tvm.__version__), "host": os.uname().nodename,
        "trials_per_task": args.trials, "reps_per_path": args.reps, "trials_per_iter": args.trials_per_iter, "seed": args.seed,
        "strategy": "evolutionary (xgb)", "tasks": rows,
        "ours_records_per_s_per_core": ours_n / ours_t / hw.cores,
        "tune_tir_records_per_s_per_core": tir_n / tir_t / hw.cores,
        "overhead_time_ratio": ours_t / tir_t,  # >1 means ours is slower
        "ours_extra_work_pct_of_tuning_time": 100.0 * sum(r["ours"]["components"]["total_s"] for r in rows) / ours_t,
        "overhead_per_record_pct": 100.0 * ((ours_t / max(ours_n, 1)) / (tir_t / max(tir_n, 1)) - 1.0),
        "corpus_rows_stored": stats.get("records") if isinstance(stats, dict) else None,
        "note": "shared 2-core machine: absolute times are noisy; compare ratios",
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=str)
    print(json.dumps({k: v for k, v in result.items() if k not in ("tasks", "hardware")}, indent=2, default=str))
    return 0


def _merge(runs: list[dict]) -> dict:
    """Totals of repeated runs of one path on one task (times and records add up)."""
    out = {"elapsed_s": sum(r["elapsed_s"] for r in runs), "records": sum(r["records"] for r in runs),
           "runs": runs}
    best = [r["best_latency_s"] for r in runs if r["best_latency_s"]]
    out["best_latency_s"] = min(best) if best else None
    return out


def _us(x: float | None) -> str:
    return f"{x * 1e6:.1f}" if x else "-"


if __name__ == "__main__":
    sys.exit(main())
