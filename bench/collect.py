"""Where collection time goes, and our tuner vs plain ``ms.tune_tir``, side by side in one run.

For a full-size conv2d (the heaviest of ResNet-50, 224x224) and a full-size matmul (the heaviest
of BERT-base, sequence 128), at each trial budget, each task is tuned by both paths in the same
process, in alternating order, with the same search (evolutionary, xgb), seed and measurement
protocol (one ``EvaluatorConfig``):

- **ours**: ``collectors.tuner.tune_task`` (pool builder linking ``.so`` files, checked runner
  with a warm worker, records appended to a Parquet corpus per batch, every candidate's answer
  checked);
- **plain**: ``ms.tune_tir`` with MetaSchedule's LocalBuilder/LocalRunner, as a user calls it
  (no correctness check, no corpus); and, at one budget, **plain+light**: the same with the
  x86-only tensor-intrinsic initializer, to separate that fix from the builder/runner work.

At 64 trials (the headline) each pair runs ``--repeats`` times in ABBA order and each (task, path)
counts with its fastest run: on this shared VM whole runs at times went at half speed (either
path; /proc/stat showed no steal), and the fastest run is the least disturbed one. The sum over
all repeats is kept beside it (``ratio_vs_tune_tir_all_repeats``), and ``limits`` says what bounds
the ratio: the stages both paths pay in full (search, cost model, the timed runs, the LLVM compile).

Each run is profiled with MetaSchedule's Profiler (search, cost model, SendToBuilder,
SendToRunner, callbacks; ours adds tlm/DesignSpace and tlm/Reference). Per-candidate stage
costs (lowering+codegen, export .so vs .tar, load .so vs .tar+link, timing, checking, worker
start-up) are measured directly on sampled candidates, and the run-to-run spread of one tuned
schedule's latency is measured for several ``min_repeat_ms`` values.

    .venv/bin/python -m bench.collect [--trials 16,64,256] [--out bench/results/collect.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench._common import matmul_task, percentile, refuse_beside_measuring

logger = logging.getLogger("bench.collect")

def _profile_dict(prof: Any) -> dict[str, float]:
    """Seconds per Profiler section (the Profiler's own table is in minutes)."""
    out = {}
    for line in prof.table().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            out[cells[1]] = float(cells[2]) * 60.0
    return out


def _group(p: dict[str, float], elapsed: float) -> dict[str, float]:
    """The breakdown the issue asks for, from Profiler sections."""
    search = sum(v for k, v in p.items() if k.startswith("EvoSearch") or k.startswith("ReplayTrace"))
    g = {
        "design_space_s": p.get("tlm/DesignSpace", 0.0),
        "reference_s": p.get("tlm/Reference", 0.0),
        "search_s": search,
        "cost_model_update_s": p.get("MeasureCallback/UpdateCostModel", 0.0),
        "build_s": p.get("SendToBuilder", 0.0),
        "run_s": p.get("SendToRunner", 0.0),
        "storage_and_records_s": p.get("MeasureCallback/PyMeasureCallback", 0.0),
    }
    g["other_s"] = max(0.0, elapsed - sum(g.values()))
    return g


def _cpu_jiffies() -> tuple[int, int]:
    """(all, stolen) CPU time of this machine so far (/proc/stat): the share the hypervisor gave
    to other guests during a run says how far a timing on this shared VM can be trusted."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def _with_steal(run: Any, *args: Any, **kwargs: Any) -> dict:
    before = _cpu_jiffies()
    out = run(*args, **kwargs)
    after = _cpu_jiffies()
    out["cpu_steal_frac"] = (after[1] - before[1]) / max(1, after[0] - before[0])
    return out


def evaluator_config(min_repeat_ms: int) -> Any:
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=False)


def run_ours(task: Any, hw: Any, corpus: Any, trials: int, min_repeat_ms: int, seed: int) -> dict:
    from tvm.s_tir import meta_schedule as ms

    from collectors.tuner import TuneConfig, tune_task

    appended = [0.0]

    def store(records: list) -> None:
        t = time.perf_counter()
        corpus.append(records)
        appended[0] += time.perf_counter() - t

    cfg = TuneConfig(trials=trials, seed=seed, min_repeat_ms=min_repeat_ms)
    t0 = time.perf_counter()
    with ms.Profiler() as prof:
        s = tune_task(task, hw, cfg, on_records=store, run_id="bench")
    elapsed = time.perf_counter() - t0
    p = _profile_dict(prof)
    return {"elapsed_s": elapsed, "records": s.records, "errors": s.errors, "wrong_answers": s.wrong_answers,
            "best_latency_s": s.best_latency_s, "best_trace_json": s.best_trace_json,
            "records_per_s": s.records / elapsed, "append_s": appended[0], "breakdown": _group(p, elapsed),
            "profile_s": p}


def run_plain(task: Any, hw: Any, trials: int, min_repeat_ms: int, seed: int, *, light: bool = False) -> dict:
    """``ms.tune_tir`` with MetaSchedule's own LocalBuilder/LocalRunner (light: x86 intrinsics only)."""
    from tvm.s_tir import meta_schedule as ms

    from collectors.fast_import import install

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-tune-tir-") as work_dir, ms.Profiler() as prof:
        db = ms.tune_tir(
            task.mod, hw.tvm_target(), work_dir, trials, num_trials_per_iter=min(64, trials),
            builder=ms.builder.LocalBuilder(max_workers=hw.cores, initializer=install if light else None),
            runner=ms.runner.LocalRunner(evaluator_config=evaluator_config(min_repeat_ms),
                                         initializer=install if light else None),
            cost_model="xgb", strategy="evolutionary", seed=seed, num_tuning_cores=hw.cores,
        )
        recs = db.get_all_tuning_records()
    elapsed = time.perf_counter() - t0
    lat = [statistics.median(float(x) for x in r.run_secs) for r in recs
           if r.run_secs is not None and len(r.run_secs) and all(float(x) < 1e9 for x in r.run_secs)]
    p = _profile_dict(prof)
    return {"elapsed_s": elapsed, "records": len(recs), "best_latency_s": min(lat) if lat else None,
            "records_per_s": len(recs) / elapsed, "breakdown": _group(p, elapsed), "profile_s": p}


def _candidates(task: Any, hw: Any, n: int) -> list:
    """``n`` valid programs of ``task``: random decisions of its sketches (MetaSchedule's samples)."""
    from tvm.s_tir.schedule import Schedule, Trace

    from collectors.sketches import design_space, refusing_postproc

    sketches, out, seed = design_space(task.mod, hw), [], 0
    while len(out) < n and seed < 20 * n:
        seed += 1
        sch = Schedule(task.mod, seed=seed)
        Trace(sketches[seed % len(sketches)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if refusing_postproc(sch, task, hw) is None:
            out.append(sch.mod)
    return out


def stage_costs(task: Any, hw: Any, n: int, min_repeat_ms: int) -> dict:
    """Median seconds per candidate of each stage, measured in this process on ``n`` samples."""
    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    from collectors.correctness import compare, make_reference

    ref = make_reference(task.mod)
    times: dict[str, list[float]] = {k: [] for k in ("lower_codegen", "export_so", "export_tar_ms_default",
                                                     "load_so", "load_tar_and_link_ms_default", "timing", "check")}
    dev = tvm.cpu(0)
    with tempfile.TemporaryDirectory() as d:
        for i, mod in enumerate(_candidates(task, hw, n)):
            t = time.perf_counter()
            rt = tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=hw.tvm_target())
            times["lower_codegen"].append(time.perf_counter() - t)
            t = time.perf_counter()
            rt.export_library(f"{d}/{i}.so")
            times["export_so"].append(time.perf_counter() - t)
            t = time.perf_counter()
            rt.export_library(f"{d}/{i}.tar", fcompile=tar)
            times["export_tar_ms_default"].append(time.perf_counter() - t)
            t = time.perf_counter()
            tvm.runtime.load_module(f"{d}/{i}.tar")
            times["load_tar_and_link_ms_default"].append(time.perf_counter() - t)
            t = time.perf_counter()
            lib = tvm.runtime.load_module(f"{d}/{i}.so")
            times["load_so"].append(time.perf_counter() - t)
            args = [tvm.runtime.tensor(a, device=dev) for a in ref.inputs]
            t = time.perf_counter()
            run_evaluator_common(lib, dev, evaluator_config(min_repeat_ms), [args])
            times["timing"].append(time.perf_counter() - t)
            t = time.perf_counter()
            assert compare([a.numpy() for a in args], ref.outputs) is None
            times["check"].append(time.perf_counter() - t)
    out = {f"{k}_s": statistics.median(v) for k, v in times.items() if v}
    out["candidates"] = len(times["timing"])
    out.update(worker_start_costs())
    return out


def worker_start_costs() -> dict:
    """Seconds for a fresh worker process to be ready: plain (what each LocalBuilder worker imports
    on every build() call) vs with the light x86 intrinsics (collectors.fast_import)."""
    def timed(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        return time.perf_counter() - t

    return {"worker_start_full_intrinsics_s": timed("import tvm.s_tir.tensor_intrin"),
            "worker_start_light_intrinsics_s": timed("import collectors.fast_import as f; f.install()")}


def repeat_spread(task: Any, hw: Any, trace_json: str, values: tuple[int, ...], n: int = 20) -> dict:
    """Run-to-run spread of one tuned schedule's latency for each ``min_repeat_ms``: ``n``
    separate measurements per value, the values interleaved round-robin so that drift on a
    shared machine hits them alike. ``spread`` = (p90 - p10) / median (one preempted run does not
    decide it); ``max_min`` = (max - min) / median is kept beside it; and the seconds one
    measurement costs."""
    import numpy as np
    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common
    from collectors.correctness import make_reference
    from collectors.tir import schedule_of

    sch = schedule_of(task.mod, trace_json)
    lib = tvm_build(sch.mod, target=hw.tvm_target())
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(a, device=dev) for a in make_reference(task.mod).inputs]
    lats: dict[int, list[float]] = {v: [] for v in values}
    cost: dict[int, list[float]] = {v: [] for v in values}
    for _ in range(n):
        for v in values:
            t = time.perf_counter()
            lats[v].append(statistics.median(run_evaluator_common(lib, dev, evaluator_config(v), [args])))
            cost[v].append(time.perf_counter() - t)
    out = {}
    for v in values:
        a = np.asarray(lats[v])
        med = float(np.median(a))
        out[str(v)] = {"median_latency_s": med, "spread": (percentile(a, 90) - percentile(a, 10)) / med,
                       "max_min": float(a.max() - a.min()) / med, "cv": float(a.std() / a.mean()),
                       "seconds_per_measurement": statistics.median(cost[v]), "n": n}
    return out


def spread_only(out_path: str, seed: int) -> int:
    """Re-measure only the min_repeat_ms spread (a 64-trial conv2d tune, then the study) into
    an existing results file."""
    from collectors.hardware import detect_hardware
    from collectors.threads import pin_tvm_threads
    from storage import Corpus

    hw = detect_hardware("cpu")
    pin_tvm_threads(hw.cores)
    conv = pick_tasks(hw)[0]
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as d:
        best = run_ours(conv, hw, Corpus.open(d), 64, 20, seed)
    with open(out_path) as f:
        out = json.load(f)
    out["min_repeat_ms_spread"] = repeat_spread(conv, hw, best["best_trace_json"], (1, 5, 10, 20, 50, 100))
    out["min_repeat_ms_spread_task"] = {"task": conv.task_name, "best_latency_s_in_tuning": best["best_latency_s"]}
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1, default=str)
    return 0


def runs_of(rows: list[dict], trials: int, path: str, fastest: bool = True) -> list[dict]:
    """The runs of ``path`` at ``trials``: with ``fastest``, each task's fastest repeat, the run
    least disturbed by this shared VM (whole runs here at times went at half speed, either path,
    with no steal time shown); else every repeat."""
    sel = [r for r in rows if r["trials"] == trials and path in r]
    if not fastest:
        return [r[path] for r in sel]
    best: dict[str, dict] = {}
    for r in sel:
        if r["task"] not in best or r[path]["elapsed_s"] < best[r["task"]]["elapsed_s"]:
            best[r["task"]] = r[path]
    return list(best.values())


def pick_tasks(hw: Any) -> list:
    from collectors.tasks import extract_tasks

    conv = next(t for t in extract_tasks("resnet50", hw) if t.op_kind == "conv2d")
    mm = next(t for t in extract_tasks("bert_base", hw, seq_len=128) if t.op_kind == "matmul")
    return [conv, mm]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", default="16,64,256", help="comma-separated trial budgets per task")
    p.add_argument("--light-at", type=int, default=64, help="budget at which plain+light is also run (0: never)")
    p.add_argument("--min-repeat-ms", type=int, default=None, help="evaluator min_repeat_ms of both paths "
                   "(default: TuneConfig's)")
    p.add_argument("--repeat-at", type=int, default=64, help="budget whose ours/plain pair is run --repeats times")
    p.add_argument("--repeats", type=int, default=3, help="runs of each path at --repeat-at (ABBA order)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench/results/collect.json")
    p.add_argument("--spread-only", action="store_true", help="re-measure only the min_repeat_ms spread into --out")
    args = p.parse_args(argv)
    refuse_beside_measuring("time collections")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    if args.spread_only:
        return spread_only(args.out, args.seed)

    from dataclasses import asdict

    from collectors.hardware import detect_hardware
    from collectors.threads import pin_tvm_threads
    from collectors.tuner import TuneConfig
    from storage import Corpus

    hw = detect_hardware("cpu")
    pin_tvm_threads(hw.cores)  # in-process timings (spread, stages) on the key's cores, as the runner
    budgets = [int(x) for x in args.trials.split(",")]
    min_repeat_ms = args.min_repeat_ms if args.min_repeat_ms is not None else TuneConfig().min_repeat_ms
    tasks = pick_tasks(hw)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-warmup-") as warm_dir:  # first-use costs, untimed
        warm = matmul_task(32, 32, 32, "warmup")
        run_ours(warm, hw, Corpus.open(warm_dir), 2, min_repeat_ms, args.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as corpus_dir:
        corpus = Corpus.open(corpus_dir)
        for trials in budgets:
            for i, task in enumerate(tasks):
                logger.info("%s (%.0f MFLOP), %d trials", task.task_name, task.flops / 1e6, trials)
                about = {"task": task.task_name, "model": task.model, "op_kind": task.op_kind,
                         "mflop": task.flops / 1e6, "trials": trials}
                for rep in range(args.repeats if trials == args.repeat_at else 1):
                    row = dict(about, repeat=rep + 1)
                    # ours/plain alternate which goes first (ABBA over tasks and repeats), so
                    # that a drift of this shared machine hits both paths alike.
                    first_ours = (i + budgets.index(trials) + rep) % 2 == 0
                    order = ["ours", "plain"] if first_ours else ["plain", "ours"]
                    if trials == args.light_at and rep == 0:
                        order.append("plain_light")
                    for path in order:
                        if path == "ours":
                            row[path] = _with_steal(run_ours, task, hw, corpus, trials, min_repeat_ms, args.seed)
                        else:
                            row[path] = _with_steal(run_plain, task, hw, trials, min_repeat_ms, args.seed,
                                                    light=path == "plain_light")
                        logger.info("  %s: %.1f s, %.2f records/s", path, row[path]["elapsed_s"],
                                    row[path]["records_per_s"])
                    row["ratio_records_per_s"] = row["ours"]["records_per_s"] / row["plain"]["records_per_s"]
                    rows.append(row)
        best = min((r for r in rows if r["op_kind"] == "conv2d"), key=lambda r: r["ours"]["best_latency_s"] or 1e9)
        spread = repeat_spread(tasks[0], hw, best["ours"]["best_trace_json"], (1, 5, 10, 20, 50, 100))
    stages = {t.op_kind: stage_costs(t, hw, 8, min_repeat_ms) for t in tasks}

    def ratio(trials: int, path: str = "plain", fastest: bool = True) -> float:
        """ours' records/s over ``path``'s at ``trials``, over both tasks (:func:`runs_of`)."""
        def rate(p: str) -> float:
            sel = runs_of(rows, trials, p, fastest)
            return sum(r["records"] for r in sel) / sum(r["elapsed_s"] for r in sel)

        return rate("ours") / rate(path)

    def limits(trials: int) -> dict:
        """What bounds the ratio at ``trials`` (fastest runs): ours' time by stage, and the ratio
        it would reach if only the stages both paths pay in full were left: MetaSchedule's search
        and cost model, the timed runs of the shared protocol (in ``run_s``), and with
        ``..._own_work_were_free`` also the LLVM compile of every candidate (in ``build_s``)."""
        at = [r for r in rows if r["trials"] == trials]
        ours, plain = runs_of(at, trials, "ours"), runs_of(at, trials, "plain")
        stage = {k: sum(r["breakdown"][k] for r in ours) for k in ours[0]["breakdown"]}
        shared = stage["search_s"] + stage["cost_model_update_s"] + stage["run_s"]
        plain_s = sum(r["elapsed_s"] for r in plain)
        return {
            "ours_s": sum(r["elapsed_s"] for r in ours), "plain_s": plain_s, "ours_by_stage_s": stage,
            "ratio_if_builds_and_our_own_work_were_free": plain_s / shared,
            "ratio_if_our_own_work_were_free": plain_s / (shared + stage["build_s"]),
            "ratio_per_repeat": [sum(r["plain"]["elapsed_s"] for r in at if r["repeat"] == k)
                                 / sum(r["ours"]["elapsed_s"] for r in at if r["repeat"] == k)
                                 for k in sorted({r["repeat"] for r in at})],
        }

    for r in rows:
        r["ours"].pop("best_trace_json", None)
    headline = 64 if 64 in budgets else budgets[0]
    out = {
        "what": "measured records/s: collectors.tuner.tune_task (ours) vs plain ms.tune_tir, same trials, search, "
                "seed and evaluator, full-size tasks, one run; breakdown from MetaSchedule's Profiler",
        "command": "python -m bench.collect " + " ".join(argv if argv is not None else sys.argv[1:]),
        "hardware": asdict(hw), "min_repeat_ms": min_repeat_ms,
        "trials_per_task": headline,
        "ratio_vs_tune_tir": ratio(headline),
        "ratio_vs_tune_tir_all_repeats": ratio(headline, fastest=False),
        "ratio_vs_tune_tir_by_trials": {str(t): ratio(t) for t in budgets},
        "ratio_vs_tune_tir_light": ratio(args.light_at, "plain_light") if args.light_at in budgets else None,
        "limits": limits(headline),
        "rows": rows, "stage_costs": stages, "min_repeat_ms_spread": spread,
        "min_repeat_ms_spread_task": {"task": tasks[0].task_name, "best_latency_s_in_tuning": best["ours"]["best_latency_s"]},
        "wall_s": time.perf_counter() - t_all,
        "note": "shared 2-core machine: compare ratios from the same run; plain = MetaSchedule's LocalBuilder "
                "(a fresh pool per batch, .tar artifacts) and LocalRunner (links each .tar), no correctness check",
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, default=str)
    logger.info("ratio vs tune_tir at %s trials: %.2fx; written to %s", out["trials_per_task"], out["ratio_vs_tune_tir"],
                args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
