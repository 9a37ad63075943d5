"""MetaSchedule's reference searches for the quality benchmark, cached so they run once.

A reference (``ms_<budget>``) is the best schedule one evolutionary search found within its
first ``budget`` measured candidates. A 1000-trial search of a heavy task takes the better part
of ten minutes on 2 cores, so each search's outcome is stored by what determines it (workload,
hardware key, trials, seed) under ``bench/results/ms_cache/<hardware key>/``: the trace of its
best schedule at every budget, the time it took to get there and its best-so-far curve. A later
``bench.quality`` run rebuilds those schedules from their traces and *re-measures* them beside
every other method (``collectors.judge``) instead of searching again; the latency recorded
during the search is kept only as information. A cache of another hardware key is never used.

    .venv/bin/python -m bench.references --trials 1000 --tasks 8   # the heaviest 8 of the judging set

prints each search as it finishes; a stopped run keeps every finished search (one file each).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Sequence

from bench._common import refuse_beside_measuring

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE_DIR = os.path.join(HERE, "results", "ms_cache")


def cache_path(workload_key: str, hardware_key: str, trials: int, seed: int, cache_dir: str = CACHE_DIR) -> str:
    """Where the search of this workload on this hardware, with this budget and seed, is kept."""
    return os.path.join(cache_dir, hardware_key, f"{workload_key}-t{trials}-s{seed}.json")


def reference_search(task: Any, hardware: Any, trials: int, budgets: Sequence[int] = (64,), *, seed: int = 0,
                     cache_dir: str = CACHE_DIR) -> Any:
    """``collectors.judge.Search`` of ``trials`` evolutionary trials: from the cache when this
    search ran before (same workload, hardware key, trials, seed), else searched and stored.
    Either way it holds the methods of ``budgets`` (and ``trials``) only, rebuilt from the stored
    traces, so what a caller gets does not depend on whether the cache had it.

    A search stores every power-of-two budget from 64 up to ``trials`` beside ``budgets``, so any
    of those can be asked later without searching again."""
    from collectors.judge import Method, Search, search_methods
    from collectors.tir import schedule_of

    path = cache_path(task.workload_key, hardware.key, trials, seed, cache_dir)
    stored = _read(path)
    wanted = {f"ms_{b}" for b in budgets if b < trials} | {f"ms_{trials}"}
    if stored is None or not wanted <= set(stored["budgets"]):
        every = sorted(set(budgets) | set(_powers_of_two(64, trials)))
        search = search_methods(task, hardware, trials, budgets=every, seed=seed)
        stored = {
            "workload_key": task.workload_key, "task_name": task.task_name, "hardware_key": hardware.key,
            "trials": trials, "seed": seed, "wall_s": search.wall_s, "curve": search.curve,
            "searched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budgets": {n: {"trace_json": search.traces[n], "time_s": m.time_s} for n, m in search.methods.items()},
        }
        _write(path, stored)
    methods = {n: Method([schedule_of(task.mod, b["trace_json"])], b["time_s"])
               for n, b in stored["budgets"].items() if n in wanted}
    return Search(methods, [tuple(p) for p in stored["curve"]], stored["wall_s"],
                  {n: stored["budgets"][n]["trace_json"] for n in methods})


def known_references(task: Any, hardware: Any, corpus: Any) -> dict[str, Any]:
    """What a study judges a method against without searching: ``ms_256`` where this module has
    the task's 256-trial search cached, ``corpus_best`` (the key's fastest record in ``corpus``)
    where the corpus measured it; each a ``collectors.judge.Method`` to re-measure."""
    from collectors.judge import Method
    from collectors.tir import schedule_of

    out = {}
    if os.path.exists(cache_path(task.workload_key, hardware.key, 256, 0)):  # never searched here
        out["ms_256"] = reference_search(task, hardware, 256).methods["ms_256"]
    best = corpus.top_k(task.workload_key, hardware.key, k=1).to_pylist()
    if best:
        out["corpus_best"] = Method([schedule_of(task.mod, best[0]["trace_json"])], 0.0)
    return out


def _powers_of_two(lo: int, hi: int) -> list[int]:
    out, b = [], lo
    while b < hi:
        out.append(b)
        b *= 2
    return out


def _read(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _write(path: str, obj: dict) -> None:
    """Atomically: a search killed while writing leaves no half file behind."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=None, help="corpus of the held-out workloads (default: data/corpus)")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--tasks", type=int, default=8, help="the N heaviest tasks of the judging set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", choices=("judging", "train"), default="judging",
                    help="judging: the heaviest held-out tasks; train: the fixed sample of training workloads "
                    "the teacher is judged on (bench.judging.training_sample; --tasks is its size)")
    args = ap.parse_args(argv)
    refuse_beside_measuring("search the references")

    import logging

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    from bench.judging import judging_set, pin_sample, training_sample
    from collectors.hardware import detect_hardware

    hw = detect_hardware("cpu")
    if args.set == "train":
        tasks = training_sample(hw.key, corpus_dir=args.corpus, n=args.tasks)
        pin_sample(hw.key, tasks)
    else:
        tasks = judging_set(hw, corpus_dir=args.corpus, max_tasks=args.tasks)
    for i, task in enumerate(tasks):
        hit = os.path.exists(cache_path(task.workload_key, hw.key, args.trials, args.seed))
        t0 = time.time()
        s = reference_search(task, hw, args.trials, seed=args.seed)
        best = min((lat for _, lat in s.curve), default=None)
        print(f"[{i + 1}/{len(tasks)}] {task.task_name} ({task.model}): {'cached' if hit else 'searched'} "
              f"in {time.time() - t0:.0f} s; best while searching "
              f"{best * 1e6:.0f} us" if best else "no valid candidate", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
