"""A search seeded by the model: the TLM's candidates start MetaSchedule's evolutionary search.

A plain search spends its first batches on random programs and a cost model that knows
nothing. Here, within the same trial budget:

1. the TLM writes ``seeds`` candidates, ranked by the hardware key's corpus-trained cost model
   (``tlm.service.generator.generate`` with a ranker; no measurement);
2. they are measured like a search's candidates (``collectors.tuner.measure_schedules``);
3. MetaSchedule's evolutionary search runs the remaining ``trials - seeds - finalists`` trials
   with those records in its database (its first population's measured part is drawn from them)
   and the corpus-trained XGBoost model as its cost model, updated with every measurement as usual;
4. the ``finalists`` fastest distinct programs are measured again, side by side in one call, and
   the fastest there is the search's answer. Why: each candidate is timed once, in its own batch,
   and this host's speed moves up to 1.5x between calls; the fastest single timing of 64 is partly
   luck. Without this step the answer was 6-48% slower than the rules' seed it started from on 4
   of 8 of BERT's and ViT's matmuls when timed beside it (0.85x MS@1000 on the Emerald Rapids;
   0.97x with it, bench/results/levers.md row 0b).

Every measured candidate is a record under ``tlm-seeded:<model id>`` (the seeds and the search's
own), so the closed loop learns from them like from any search.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from collectors.hardware import Hardware
from collectors.tasks import Task

#: the TLM's candidates measured first, out of the trial budget
SEEDS = 16
#: the fastest programs measured again side by side before one is kept, out of the trial budget
FINALISTS = 4


@dataclass
class SeededSearch:
    """What one seeded search measured, and where its time went."""

    records: list = field(default_factory=list)  # every measured record, seeds first
    seeds: int = 0
    generate_s: float = 0.0  # the model and the cost model writing and ranking the seeds
    search_s: float = 0.0  # measuring the seeds, the search after them and the finalists again
    best: Any = None  # the fastest correct record of the finalists' second timing (None if none ran)
    finals: list = field(default_factory=list)  # the finalists' second timing (not stored: same programs)

    @property
    def elapsed_s(self) -> float:
        return self.generate_s + self.search_s


def seeded_tuner_name(model_id: str) -> str:
    """The ``tuner`` column of a seeded search's records: ``tlm-seeded:<model id>``."""
    return f"tlm-seeded:{model_id}"


def seeded_search(task: Task, hardware: Hardware, model: Any, tokenizer: Any, ranker: Any, *, model_id: str,
                  trials: int = 64, seeds: int = SEEDS, finalists: int = FINALISTS, trials_per_iter: int = 16,
                  seed: int = 0, run_id: str = "", on_records: Callable[[list], None] | None = None) -> SeededSearch:
    """``trials`` measurements of ``task``: the model's ``seeds`` best-ranked candidates,
    MetaSchedule's evolutionary search seeded with them and searching with a copy of ``ranker``
    (a :class:`collectors.cost_model.CostModel`; the caller's copy is never changed), then the
    ``finalists`` fastest programs timed again side by side (0: keep the fastest single timing; at
    most half of the trials left after the seeds, so a small budget still searches).
    ``on_records`` gets every new program's record; the finalists' second timing is only in
    ``finals`` (the corpus stores a program once)."""
    from collectors.tir import schedule_of
    from collectors.tuner import TuneConfig, measure_schedules
    from tlm.service.generator import MAX_K, generate

    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if finalists < 0:
        raise ValueError(f"finalists must be >= 0, got {finalists}")
    seeds = max(1, min(seeds, trials, MAX_K))
    finalists = min(finalists, (trials - seeds) // 2)  # never more than half of what the search gets
    out = SeededSearch()
    tuner = seeded_tuner_name(model_id)

    def keep(batch: list) -> None:
        out.records.extend(batch)
        if on_records is not None:
            on_records(batch)

    t0 = time.perf_counter()
    g = generate(task, hardware, model, tokenizer, k=seeds, ranker=ranker)
    out.generate_s = time.perf_counter() - t0
    schedules = [c.schedule for c in g.candidates]
    t1 = time.perf_counter()
    measure_schedules(task, hardware, schedules, tuner=tuner,
                      config=TuneConfig(trials=len(g.candidates), seed=seed, tuner=tuner), on_records=keep,
                      run_id=run_id)
    out.seeds = len(out.records)
    left = trials - out.seeds - finalists
    if left > 0:
        search_more(task, hardware, list(out.records), left, ranker=ranker, tuner=tuner, seed=seed,
                    trials_per_iter=trials_per_iter, run_id=run_id, on_records=keep)
    final = fastest_programs(out.records, max(1, finalists))
    if len(final) > 1:
        measure_schedules(task, hardware, [schedule_of(task.mod, r.trace_json) for r in final], tuner=tuner,
                          config=TuneConfig(trials=len(final), seed=seed, tuner=tuner), run_id=run_id,
                          on_records=out.finals.extend)
        final = fastest_programs(out.finals, 1) or final
    out.best = final[0] if final else None
    out.search_s = time.perf_counter() - t1
    return out


def fastest_programs(records: list, n: int) -> list:
    """The ``n`` fastest correct records of distinct programs, fastest first (a program measured
    twice counts once; none when none ran): a search's answer, or its finalists."""
    out, seen = [], set()
    for r in sorted((r for r in records if r.latency_s is not None), key=lambda r: r.latency_s):
        key = r.record_id or r.trace_json
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out[:n]


def search_more(task: Task, hardware: Hardware, records: list, trials: int, *, ranker: Any = None, tuner: str,
                seed: int = 0, trials_per_iter: int = 16, run_id: str = "",
                on_records: Callable[[list], None] | None = None) -> list:
    """``trials`` more measurements of ``task`` by MetaSchedule's evolutionary search, started from
    ``records`` (measured records of the task, the model's candidates say: the search's database
    holds them and its first population's measured part is drawn from them; it never measures
    one of them again: ``collectors.unmeasured_search``) and searching with ``ranker``'s search
    model taught those records (None: MetaSchedule's own XGBoost, fresh); the new records. The
    second phase of a seeded search, and what a compile's budget spends on a task once the
    model's ranked pool is measured (``tlm.service.whole_model.spend_budget``)."""
    from collectors.tuner import TuneConfig, tune_task

    seeds = [r for r in records if r.sketch_id >= 0]  # TVM's default lowering is no program of the space
    got: list = []

    def keep(batch: list) -> None:
        got.extend(batch)
        if on_records is not None:
            on_records(batch)

    xgb = ranker.search_model() if ranker is not None else None
    if xgb is not None:
        _learn(xgb, task, hardware, seeds)
    tune_task(task, hardware, TuneConfig(trials=trials, strategy="evolutionary", seed=seed, tuner=tuner,
                                         trials_per_iter=min(trials_per_iter, trials)),
              on_records=keep, run_id=run_id, cost_model=xgb, seed_records=seeds)
    return got


def _learn(xgb: Any, task: Task, hardware: Hardware, records: list) -> None:
    """Feed measured ``records`` of ``task`` to the search's cost model (MetaSchedule's ``update``)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from collectors.tir import schedule_of

    if not records:
        return
    ctx = ms.TuneContext(mod=task.mod, target=hardware.tvm_target(), num_threads=max(1, hardware.cores))
    schedules = [schedule_of(task.mod, r.trace_json) for r in records]
    cands = [ms.MeasureCandidate(s, ArgInfo.from_prim_func(s.mod["main"])) for s in schedules]
    results = [ms.runner.RunnerResult(run_secs=list(r.run_secs) if r.latency_s is not None else None,
                                      error_msg=r.error) for r in records]
    xgb.update(ctx, cands, results)


def seeded_tuner(model: Any, tokenizer: Any, model_id: str, ranker: Any) -> Callable[..., Any]:
    """A ``tune`` function for ``collectors.collect.collect``: each unit is one seeded search
    of ``config.trials`` measurements (``tlm collect --strategy tlm-seeded``)."""

    def tune(task: Task, hardware: Hardware, config: Any, *, on_records: Callable[[list], None] | None = None,
             run_id: str = "", progress: Callable[..., None] | None = None) -> Any:
        from collectors.tuner import TuneSummary

        s = seeded_search(task, hardware, model, tokenizer, ranker, model_id=model_id, trials=config.trials,
                          seed=config.seed, run_id=run_id, on_records=on_records)
        summary = TuneSummary(task.workload_key, task.task_name, hardware.key, seeded_tuner_name(model_id),
                              config.trials, records=len(s.records), errors=sum(r.error is not None for r in s.records),
                              best_latency_s=s.best.latency_s if s.best else None,
                              best_trace_json=s.best.trace_json if s.best else None, elapsed_s=s.elapsed_s)
        if progress is not None:
            progress(summary.records, config.trials, summary.best_latency_s)
        return summary

    return tune
