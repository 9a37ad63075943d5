"""A whole model scheduled by the TLM: one generated schedule per task, in a MetaSchedule database.

``tlm compile`` and the demo use it the same way: :func:`schedule_tasks` asks a *source* for
each task's candidates (the model loaded here, :func:`local_source`, or a running server,
:func:`endpoint_source`), keeps the model's top-1 or, with ``top_k > 1``, measures the k
candidates (correctness-checked) and keeps the fastest; :func:`database_of` writes the chosen
schedules into a MetaSchedule ``MemoryDatabase``, which ``compile_relax``
(``collectors.compile.compile_model``) applies to the Relax module. A task the source cannot
schedule (no schedulable block, say) keeps TVM's default lowering and says why.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from collectors.hardware import Hardware
from collectors.tasks import Task

log = logging.getLogger(__name__)


@dataclass
class Proposal:
    """What a source proposed for one task: ranked traces (postprocessed, as JSON)."""

    traces: list[list]  # best-ranked first
    model_id: str
    generate_s: float  # as the source measured it (the server's own, over HTTP)


@dataclass
class TaskSchedule:
    """The schedule chosen for one task."""

    task: Task
    trace: list | None = None  # the chosen postprocessed trace (None: TVM's default lowering)
    candidates: int = 0
    rank: int = 0  # rank (by likelihood) of the chosen candidate
    latency_s: float | None = None  # measured (top_k > 1), correct
    generate_s: float = 0.0
    measure_s: float = 0.0
    error: str | None = None  # why the task keeps the default lowering
    source: str = "model"  # "corpus": the key's fastest measured record; "model": the source's; "default": TVM's;
    # "search": found by the search a budget runs once the model's ranked pool is measured
    default_s: float | None = None  # TVM's default lowering of the task, measured (spend_budget's first batch)


#: ``source(task, k) -> Proposal``
Source = Callable[[Task, int], Proposal]


#: the smallest ranked pool a task of a whole model gets (its greedy programs and the rules' come on top)
MIN_POOL = 16


def weighted_pools(tasks: Sequence[Task]) -> dict[str, int]:
    """The ranked pool of each task of a whole model, sized by its weight: the full pool
    (``generator.RANK_POOL``) for the heaviest (FLOPs x occurrences), ``RANK_POOL * sqrt(share)``
    for the rest, at least :data:`MIN_POOL`. A task that is 1% of the heaviest gets a tenth of
    its pool: on BERT-base (Zen 3) the 12 ranked pools of a softmax took 12.6 of 41 s for 0.0001
    of the model's FLOPs."""
    from tlm.service.generator import RANK_POOL

    weight = {t.workload_key: (t.flops or 0.0) * max(1, t.weight) for t in tasks}
    top = max(weight.values(), default=0.0)
    if top <= 0:
        return {k: RANK_POOL for k in weight}
    return {k: max(MIN_POOL, min(RANK_POOL, round(RANK_POOL * (w / top) ** 0.5))) for k, w in weight.items()}


def local_source(hardware: Hardware, model: Any, tokenizer: Any, model_id: str, ranker: Any = None,
                 pools: dict[str, int] | None = None) -> Source:
    """Candidates from a model loaded in this process (ranked by ``ranker``, its cost model, if
    given, over each task's pool in ``pools``, by workload key: :func:`weighted_pools`). A first
    ask for one candidate is the generator's ranked answer of one (the rules' program, no pool
    decoded, where the rules write one); a ranked pool, once asked for more, is kept whole, so
    :func:`spend_budget` asking a task again for more candidates decodes nothing (it re-decoded
    the pool every batch: 152 of a 222 s compile at budget 64)."""
    from collectors.tir import trace_json
    from tlm.service.generator import MAX_K, RANK_POOL, generate

    ranked: dict[str, tuple[list, list]] = {}  # workload key -> (the ranked pool's traces, their JSON so far)

    def source(task: Task, k: int) -> Proposal:
        pool = (pools or {}).get(task.workload_key, RANK_POOL)
        if ranker is None:
            g = generate(task, hardware, model, tokenizer, k=k, pool=pool)
            return Proposal([trace_json(c.schedule.trace) for c in g.candidates], model_id, g.generate_s + g.check_s)
        if k == 1 and task.workload_key not in ranked:  # the rules' program where they write one: no pool decoded
            g = generate(task, hardware, model, tokenizer, k=1, ranker=ranker, pool=pool)
            return Proposal([trace_json(g.candidates[0].schedule.trace)], model_id, g.generate_s + g.check_s)
        cost = 0.0  # asked again (spend_budget): nothing to decode
        if task.workload_key not in ranked:  # a ranked pool is decoded, proven and ranked whole whatever k is
            g = generate(task, hardware, model, tokenizer, k=MAX_K, ranker=ranker, pool=pool)
            ranked[task.workload_key], cost = ([c.schedule.trace for c in g.candidates], []), g.generate_s + g.check_s
        traces, done = ranked[task.workload_key]
        done += [trace_json(t) for t in traces[len(done):k]]  # written out as asked for (~1 ms a trace)
        return Proposal(done[:k], model_id, cost)

    return source


def endpoint_source(url: str, hardware_key: str, *, token: str | None = None, rank: bool = True,
                    pools: dict[str, int] | None = None) -> Source:
    """Candidates from a running ``tlm serve`` at ``url`` (the task's TVMScript is sent; ``rank``:
    the server's cost model ranks them when its model has one, over each task's pool in ``pools``)."""
    from tlm.service.client import ScheduleClient

    client = ScheduleClient(url, token=token)

    def source(task: Task, k: int) -> Proposal:
        # the server's programs always: schedule_tasks decides on the default lowering itself (at top_k 1;
        # a measured top_k measures the candidates instead)
        r = client.schedules(task.tvmscript, hardware_key, k=k, rank=rank, pool=(pools or {}).get(task.workload_key),
                             use_default=False)
        return Proposal([c.trace for c in r.candidates], r.model_id, r.generate_s + r.check_s)

    return source


def schedule_tasks(tasks: Sequence[Task], hardware: Hardware, source: Source, *, top_k: int = 1,
                   on_records: Callable[[list], None] | None = None,
                   progress: Callable[[TaskSchedule], None] | None = None,
                   known: dict[str, dict] | None = None) -> list[TaskSchedule]:
    """One schedule per task: the corpus's fastest record of it on this key when ``known`` (a
    ``Corpus.best_records`` answer) has one, else the source's top-1, or the fastest of its
    ``top_k`` measured here. Measured records go to ``on_records`` (the closed loop, tuner
    ``tlm:<model id>``).
    """
    from tlm.service.api import ApiError
    from tlm.service.generator import serial_default, tuner_name

    out = []
    for task in tasks:
        ts = TaskSchedule(task)
        record = (known or {}).get(task.workload_key)
        if record is not None:  # what the cluster measured, served first
            ts.trace, ts.latency_s, ts.source, ts.candidates = json.loads(record["trace_json"]), record["latency_s"], \
                "corpus", 1
            out.append(ts)
            if progress is not None:
                progress(ts)
            continue
        why = serial_default(task, hardware) if top_k == 1 else None
        if why is not None:  # predicted: TVM's default lowering is the faster program
            ts.error, ts.source = why, "default"
            out.append(ts)
            if progress is not None:
                progress(ts)
            continue
        try:
            choice = source(task, top_k)
        except (ValueError, ApiError) as exc:  # the source cannot schedule it: TVM's default stays
            ts.error, ts.source = str(exc)[:300], "default"
            log.warning("%s keeps the default lowering: %s", task.task_name, ts.error)
        else:
            ts.candidates, ts.generate_s, ts.trace = len(choice.traces), choice.generate_s, choice.traces[0]
            if top_k > 1:
                best, records = _measure(ts, hardware, choice.traces, tuner_name(choice.model_id), on_records)
                if best is not None:
                    ts.latency_s, ts.rank = best
                    ts.trace = choice.traces[ts.rank]
                else:
                    ts.error = f"none of {len(records)} candidates ran correctly; the top-1 is kept unmeasured"
        out.append(ts)
        if progress is not None:
            progress(ts)
    return out


#: candidates measured per step of an anytime budget (one task at a time)
BUDGET_BATCH = 4
#: a task's first batch measures TVM's default lowering beside its candidates only when the task's
#: estimated one-core time (``collectors.threads.task_one_core_seconds``) is below this: the default
#: wins on tiny tasks (a parallel region costs more than their work), never on a task 500 regions
#: long, and there its unscheduled loops cost minutes (LLaMA-7B's LM head past the 30 s run limit)
DEFAULT_MEASURED_BELOW_S = 1e-3
#: trials per step of the search that goes on once a task's ranked pool is measured (an
#: evolutionary generation costs seconds of cost-model work whatever it measures)
SEARCH_BATCH = 16

#: ``improve(task, trials, the task's measured records, on_records) -> the new records``
Improver = Callable[[Task, int, list, "Callable[[list], None] | None"], list]


def search_improver(hardware: Hardware, ranker: Any, model_id: str | None = None) -> Improver:
    """The model-seeded search as a budget's second phase: MetaSchedule's evolutionary search
    from the task's measured records (the model's candidates and TVM's default), with the key's
    cost model (``ranker``; None: MetaSchedule's own, fresh), its records under
    ``tlm-seeded:<model id>`` like ``tlm collect --strategy tlm-seeded``'s. ``model_id`` None:
    the model whose candidates seeded it, read from their records (``tlm:<model id>``): a compile
    that asks a server for candidates learns which model answered only from its answers."""
    from tlm.service.seeded import search_more, seeded_tuner_name

    def improve(task: Task, trials: int, records: list, on_records: Callable[[list], None] | None) -> list:
        name = model_id or next((r.tuner.removeprefix("tlm:") for r in records if r.tuner.startswith("tlm:")),
                                "unknown")
        return search_more(task, hardware, records, trials, ranker=ranker, tuner=seeded_tuner_name(name),
                           seed=len(records), on_records=on_records)

    return improve


def spend_budget(schedules: list[TaskSchedule], hardware: Hardware, source: Source, budget: int | None, *,
                 seconds: float | None = None, batch: int = BUDGET_BATCH,
                 on_records: Callable[[list], None] | None = None,
                 progress: Callable[[TaskSchedule, int], None] | None = None,
                 improve: Improver | None = None) -> int:
    """Spend up to ``budget`` measurements (None: no count) and up to ``seconds`` of wall time
    (None: no limit; a batch starts only while time is left, so the last one may end past it)
    where the whole model gains most, in place on ``schedules`` (:func:`schedule_tasks`'s answer
    at ``top_k=1``); the measurements spent.

    Step by step, the task with the most expected time left gets the next ``batch`` of its
    ranked candidates measured (the source asked for ``k`` more each time; deterministic, so
    the first ones are those measured before): expected time = occurrences x its fastest
    measured latency, or for a task not measured yet, x its FLOPs at the measured tasks' median
    throughput; a step that did not improve a task halves its priority (Ansor's task scheduler
    favours tasks still improving the same way). A task's first batch also measures TVM's
    default lowering of it (``default_s``, one of the batch's measurements; only where it can win:
    :data:`DEFAULT_MEASURED_BELOW_S`): a task none of
    whose measured candidates beats it keeps the default (``source`` "default", ``error`` says
    why) -- on tiny tasks the serial default wins, a parallel region's start costs more than the
    work -- and the task's answer at budget 0 where the pool's first ranks do not hold it, so a
    budget only ever replaces it with a program measured faster; no trace is measured twice.
    Once a task's ranked pool is measured (``MAX_K`` candidates, or all it had), ``improve``
    (:func:`search_improver`: the model-seeded search) goes on from the task's measured
    records, :data:`SEARCH_BATCH` trials a step; without it the task is done. Every batch's
    records go to ``on_records`` at once, so Ctrl-C (KeyboardInterrupt, passed on) keeps every
    measurement made."""
    from collectors.threads import task_one_core_seconds
    from tlm.service.api import ApiError
    from tlm.service.generator import MAX_K, tuner_name

    if budget is None and seconds is None:
        raise ValueError("spend_budget needs a count of measurements, a time limit or both")
    live = [ts for ts in schedules if ts.trace is not None and ts.source == "model"]
    asked = {id(ts): 0 for ts in live}  # candidates asked for so far per task
    seen: dict[int, set[str]] = {id(ts): set() for ts in live}  # traces measured per task (as JSON)
    started = {id(ts): False for ts in live}
    damp = {id(ts): 1.0 for ts in live}
    mine: dict[int, list] = {id(ts): [] for ts in live}  # the records measured per task (the search's seeds)
    done: set[int] = set()  # tasks with nothing left to try
    spent, end = 0, None if seconds is None else time.monotonic() + seconds
    while (budget is None or spent < budget) and (end is None or time.monotonic() < end):
        measured = [ts for ts in live if ts.latency_s]
        rate = sorted(ts.latency_s / ts.task.flops for ts in measured if ts.task.flops)
        per_flop = rate[len(rate) // 2] if rate else 1.0

        def expected(ts: TaskSchedule) -> float:
            lat = ts.latency_s if ts.latency_s else (ts.task.flops or 1.0) * per_flop
            return max(1, ts.task.weight) * lat * damp[id(ts)]

        open_ = [ts for ts in live if id(ts) not in done and (asked[id(ts)] < MAX_K or improve is not None)]
        if not open_:
            break
        ts = max(open_, key=expected)
        lo = asked[id(ts)]
        if lo >= MAX_K:  # the pool is measured: the search goes on from what was
            room = SEARCH_BATCH if budget is None else min(SEARCH_BATCH, budget - spent)
            n, improved = _search_step(ts, improve, room, mine[id(ts)], on_records)
            spent += n
            if not n:
                done.add(id(ts))
            if not improved:
                damp[id(ts)] /= 2
            if progress is not None:
                progress(ts, spent)
            continue
        room = batch if budget is None else min(batch, budget - spent)
        first = not started[id(ts)]
        started[id(ts)] = True
        if first and room > 1 and task_one_core_seconds(ts.task) < DEFAULT_MEASURED_BELOW_S:
            # the task's first batch: TVM's default lowering measured beside it
            spent += _measure_default(ts, hardware, on_records)
            room -= 1
        hi = min(MAX_K, lo + room)
        try:
            choice = source(ts.task, hi)
        except (ValueError, ApiError) as exc:
            log.warning("%s: no more candidates (%s)", ts.task.task_name, exc)
            asked[id(ts)] = MAX_K
            continue
        asked[id(ts)] = hi if len(choice.traces) >= hi else MAX_K  # a pool smaller than asked: exhausted
        todo = list(enumerate(choice.traces))[lo:hi]  # (rank, trace)
        if first and ts.latency_s is None and ts.trace not in choice.traces[lo:hi]:
            # the answer at budget 0 (the rules' program where they write one, not the pool's rank
            # 0) is measured first: a later choice must beat it measured, or a budget could make the
            # model slower than none (MobileNetV2 on the Rocket Lake: 5.04 ms at 0, 6.33 ms at 64)
            kept = todo[:room - 1]
            if len(kept) < len(todo):
                asked[id(ts)] = lo + len(kept)  # the ranks it displaced come next
            todo = [(ts.rank, ts.trace)] + kept
        todo = [(r, t) for r, t in todo if json.dumps(t) not in seen[id(ts)]]
        seen[id(ts)].update(json.dumps(t) for _, t in todo)
        if not todo:
            continue
        best, records = _measure(ts, hardware, [t for _, t in todo], tuner_name(choice.model_id), on_records)
        mine[id(ts)] += records
        ts.generate_s += choice.generate_s
        spent += len(records)
        if best is not None and (ts.latency_s is None or best[0] < ts.latency_s):
            ts.latency_s, (ts.rank, ts.trace) = best[0], todo[best[1]]
            ts.source, ts.error = "model", None
        else:
            damp[id(ts)] /= 2
        if ts.default_s is not None and ts.default_s < (ts.latency_s or float("inf")):
            # never slower than doing nothing, task by task: TVM's default lowering stays
            ts.error = (f"TVM's default lowering ran {ts.default_s * 1e6:.1f} us, the fastest of the model's "
                        f"{hi} candidates " + (f"{ts.latency_s * 1e6:.1f} us" if ts.latency_s else "none correct"))
            ts.trace, ts.source, ts.latency_s = None, "default", ts.default_s
        ts.candidates = max(ts.candidates, hi)
        if progress is not None:
            progress(ts, spent)
    return spent


def _search_step(ts: TaskSchedule, improve: Improver, trials: int, mine: list,
                 on_records: Callable[[list], None] | None) -> tuple[int, bool]:
    """One step of the search after ``ts``'s ranked pool: ``trials`` more measurements from the
    task's measured records (``mine``, extended in place), ``ts`` updated when one ran faster;
    ``(measured, improved)``. A search that fails (a TVM error) measured nothing: the task is done."""
    from tlm.service.seeded import fastest_programs

    try:
        records = improve(ts.task, trials, list(mine), on_records)
    except (RuntimeError, ValueError) as exc:
        log.warning("%s: the search after the ranked pool failed (%s)", ts.task.task_name, exc)
        return 0, False
    mine += records
    ts.candidates += len(records)
    fastest = fastest_programs(records, 1)
    if not fastest or fastest[0].latency_s >= (ts.latency_s or float("inf")):
        return len(records), False
    best = fastest[0]
    ts.latency_s, ts.trace, ts.rank = best.latency_s, json.loads(best.trace_json), -1
    ts.source, ts.error = "search", None
    return len(records), True


def _measure_default(ts: TaskSchedule, hardware: Hardware, on_records: Callable[[list], None] | None) -> int:
    """Measure TVM's default lowering of ``ts``'s task (its PrimFunc unscheduled, an empty
    trace: what the untuned build runs) like a candidate, into ``ts.default_s`` (None: it
    failed); the measurements made (1). Its record goes to ``on_records`` (tuner
    ``tvm-default``) like any other, so the corpus's fastest record of a task is the truly
    fastest program, the default included; datasets skip it (no sketch of the design space)."""
    from tvm.s_tir.schedule import Schedule

    from collectors.tir import as_module

    records = _timed(ts, hardware, [Schedule(as_module(ts.task.mod))], "tvm-default", on_records)
    ts.default_s = records[0].latency_s if records else None
    return 1


def _measure(ts: TaskSchedule, hardware: Hardware, traces: list[list], tuner: str,
             on_records: Callable[[list], None] | None) -> tuple[tuple[float, int] | None, list]:
    """Build, run and check ``traces`` of ``ts``'s task as a search's candidates (``tuner``:
    ``tlm:<model id>``): ``((latency, index in traces) of the fastest correct one or None, records)``.
    A trace that does not replay on the task (:func:`_replayed`) is left out with a warning: one
    candidate, not the budget (one ended ``tlm compile --budget 256`` with a traceback)."""
    schedules, index = [], []
    for i, t in enumerate(traces):
        sch = _replayed(ts.task, t, i)
        if sch is not None:
            schedules.append(sch)
            index.append(i)
    records = _timed(ts, hardware, schedules, tuner, on_records) if schedules else []
    ok = [(r.latency_s, index[i]) for i, r in enumerate(records) if r.latency_s is not None]
    return (min(ok) if ok else None), records


def _replayed(task: Task, trace: list, rank: int) -> Any:
    """``trace`` replayed on ``task``, TVM checking its state after every primitive (the trace
    may come from a server); None, with a warning, when it does not replay. Where only that check
    fails (``Schedule verification failed``: TVM's cached flags after the layout rewrite of a
    prepacked weight; 119 candidates of a prepacked MobileNetV2's convolutions in budgets of 256
    and 1,024, the rules' program among them) the trace is replayed unchecked: the check is of
    TVM's bookkeeping, and the program still goes through the build and the correctness check."""
    from collectors.tir import schedule_of

    try:
        try:
            return schedule_of(task.mod, trace, checked=True)
        except RuntimeError as exc:  # TVM's ScheduleError and InternalError
            if "Schedule verification failed" not in str(exc):
                raise
            return schedule_of(task.mod, trace)
    except RuntimeError as exc:
        log.warning("%s: candidate %d does not replay on its task, left out (%s)", task.task_name, rank,
                    str(exc).strip().splitlines()[0][:200])
        return None


def _timed(ts: TaskSchedule, hardware: Hardware, schedules: list, tuner: str,
           on_records: Callable[[list], None] | None) -> list:
    """``schedules`` of ``ts``'s task measured in one call (``collectors.tuner.measure_schedules``),
    the time added to ``ts.measure_s``, the records handed to ``on_records`` at once; the records."""
    from collectors.tuner import measure_schedules

    t0 = time.perf_counter()
    records: list = []
    measure_schedules(ts.task, hardware, schedules, tuner=tuner, on_records=records.extend)
    ts.measure_s += time.perf_counter() - t0
    if on_records is not None:
        on_records(records)
    return records


def database_of(schedules: Sequence[TaskSchedule], hardware: Hardware) -> Any:
    """A MetaSchedule ``MemoryDatabase`` with one record per scheduled task, for ``compile_relax``.

    ``run_secs`` is the measured latency where there is one; an unmeasured top-1 gets ``[0.0]``:
    the database only ranks records of the same workload, and each workload has one record here.
    """
    from tvm.s_tir import meta_schedule as ms

    from collectors.tir import as_module, plain_json

    db = ms.database.MemoryDatabase()
    for ts in schedules:
        if ts.trace is None:
            continue
        mod = as_module(ts.task.mod)
        workload = db.commit_workload(mod)
        args_info = [plain_json(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]
        record = ms.database.TuningRecord.from_json(
            [ts.trace, [ts.latency_s if ts.latency_s is not None else 0.0], dict(hardware.target), args_info],
            workload)
        db.commit_tuning_record(record)
    return db
