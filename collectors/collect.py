"""One collection protocol: collect a unit of work into the corpus; the local loop over many.

A *unit* is (task, hardware, tuner, trial budget). :func:`collect_unit` is the only code that
collects one: it skips a unit the index already marks "done", marks it "running", tunes it
with every measured batch appended to the corpus at once (one Parquet part per batch, so a
crash loses at most the batch in flight), and marks it "done", "failed" or "interrupted". It
returns one :class:`UnitOutcome`, whose ``status`` is one of :data:`UNIT_STATUSES`. The local
loop (:func:`collect`, no Ray) and the Ray collector actor (``cluster/collector.py``) both call
it, so resume, crash safety and status rules are the same everywhere; the Ray job adds only
placement, retries and the "unplaceable" status for units no node can take.

A unit interrupted half-way is tuned again from the start next time; records it already
stored are deduplicated by their ids (counted as ``duplicates``).
"""
from __future__ import annotations

import datetime as _dt
import logging
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Collection, Sequence

from collectors.hardware import Hardware, check_runs_here
from collectors.tasks import EXPORTED, Graph, Task, extract_tasks, register_tasks, require_workloads_found, select_tasks
from collectors.tuner import TuneConfig, TuneSummary, tune_task
from collectors.progress import CollectionProgress
from storage import Record

logger = logging.getLogger(__name__)

#: What can become of a unit: tuned now, already done before, failed (an error, after any
#: retries), stopped by Ctrl-C, or never run because no node has its hardware (Ray job only).
UNIT_STATUSES = ("done", "skipped", "failed", "interrupted", "unplaceable")
#: What can become of a run: every unit done or skipped, some failed or unplaceable, the run
#: itself crashed, or stopped by Ctrl-C.
RUN_STATUSES = ("done", "partial", "failed", "interrupted")


@dataclass
class UnitOutcome:
    """What happened to one unit (small: no records; it crosses Ray's object store)."""

    workload_key: str  # the task
    hardware_key: str  # the hardware it was collected for
    task_name: str  # for people
    tuner: str  # the strategy (with trials: the resume key)
    trials: int  # the trial budget
    weight: int = 1  # occurrences of the task in its model(s)
    flops: float = 0.0  # of one run of the task
    status: str = "pending"  # one of UNIT_STATUSES once it ended ("pending" before)
    records: int = 0  # rows appended (new, after dedup)
    duplicates: int = 0  # rows the corpus already had (a unit re-measured after a crash)
    errors: int = 0  # rows that are build/run errors or wrong answers (stored as data)
    best_latency_s: float | None = None  # fastest correct candidate
    sketches: int = 0  # size of the design space
    attempts: int = 0  # times the Ray job handed it to a collector (0 in the local loop)
    node_id: str = ""  # Ray node that collected it ("local" outside Ray)
    host: str = ""  # its host name
    started_at: float = 0.0  # wall clock (time.time())
    finished_at: float = 0.0
    append_s: float = 0.0  # time spent appending to the corpus (parts + index rows)
    parts: list[str] = field(default_factory=list)  # part files written
    error: str = ""  # why it failed

    @classmethod
    def of(cls, task: Task, hardware_key: str, config: TuneConfig, **kw: Any) -> "UnitOutcome":
        return cls(task.workload_key, hardware_key, task.task_name, config.tuner_name, config.trials,
                   weight=task.weight, flops=task.flops, **kw)

    @property
    def elapsed_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at) if self.finished_at else 0.0


@dataclass
class CollectionSummary:
    """A whole run, local or on Ray: per-unit outcomes and totals (also kept in ``runs``)."""

    run_id: str
    status: str  # one of RUN_STATUSES
    outcomes: list[UnitOutcome] = field(default_factory=list)
    tuner: str = ""
    trials: int = 0
    hardware_keys: list[str] = field(default_factory=list)  # keys collected for
    idle_keys: list[str] = field(default_factory=list)  # Ray: hardware present but not asked for
    missing_keys: list[str] = field(default_factory=list)  # Ray: hardware asked for but absent
    wall_s: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def records(self) -> int:
        return sum(o.records for o in self.outcomes)

    @property
    def duplicates(self) -> int:
        return sum(o.duplicates for o in self.outcomes)

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id, "status": self.status,
            **{s: self.count(s) for s in UNIT_STATUSES},
            "records": self.records, "duplicates": self.duplicates,
            "idle_keys": self.idle_keys, "missing_keys": self.missing_keys, "wall_s": round(self.wall_s, 3),
        }


def run_status(outcomes: Sequence[UnitOutcome]) -> str:
    """The status of a run that ended normally: "done" unless a unit failed or was unplaceable."""
    return "partial" if any(o.status in ("failed", "unplaceable") for o in outcomes) else "done"


#: ``on_batch(outcome, records)`` after each appended batch (progress displays).
BatchCallback = Callable[[UnitOutcome, list], None]


def collect_unit(corpus: Any, task: Task, hardware: Hardware, config: TuneConfig, *, run_id: str,
                 node_id: str = "local", tune: Callable[..., TuneSummary] = tune_task,
                 on_batch: BatchCallback | None = None,
                 progress: Callable[[int, int, "float | None"], None] | None = None) -> UnitOutcome:
    """Collect one unit (``task`` on ``hardware`` with ``config``) into ``corpus``.

    Returns status "skipped" when the index already marks the unit done, "done" when tuned,
    "failed" (with ``error``) when tuning raised; KeyboardInterrupt marks it "interrupted" and
    is re-raised. ``tune`` is the tuning function (``tune_task``; replaceable to wrap it).
    """
    key = (task.workload_key, hardware.key, config.tuner_name, config.trials)
    res = UnitOutcome.of(task, hardware.key, config, node_id=node_id, host=socket.gethostname(),
                         started_at=time.time())
    if corpus.task_status(*key) == "done":
        res.status, res.finished_at = "skipped", time.time()
        return res
    corpus.set_task_status(*key, "running", run_id=run_id)

    def store(batch: list[Record]) -> None:
        if not batch:
            return
        now = _dt.datetime.now(_dt.timezone.utc)
        for r in batch:
            r.run_id = run_id
            r.node = r.node or res.host
            r.created_at = r.created_at or now
        t = time.perf_counter()
        out = corpus.append(batch)
        res.append_s += time.perf_counter() - t
        res.records += int(out.rows)
        res.duplicates += int(out.duplicates)
        res.parts.extend(str(p) for p in (out.part_paths or []))
        for r in batch:
            if r.error is not None:
                res.errors += 1
            elif r.latency_s is not None and (res.best_latency_s is None or r.latency_s < res.best_latency_s):
                res.best_latency_s = float(r.latency_s)
        if on_batch is not None:
            on_batch(res, batch)

    try:
        summary = tune(task, hardware, config, on_records=store, run_id=run_id, progress=progress)
        res.sketches = summary.sketches
    except KeyboardInterrupt:
        res.status, res.finished_at = "interrupted", time.time()
        corpus.set_task_status(*key, "interrupted", run_id=run_id, records=res.records + res.duplicates)
        raise
    except Exception as exc:  # noqa: BLE001 - one broken unit must not end the collection
        logger.exception("collecting %s on %s failed", task.task_name, hardware.key)
        res.status, res.error, res.finished_at = "failed", f"{type(exc).__name__}: {exc}"[:500], time.time()
        # only a unit still running: its job's driver may have ended it already (an interrupt)
        corpus.set_task_status(*key, "failed", run_id=run_id, records=res.records + res.duplicates,
                               only_from=("running",))
        return res
    res.status, res.finished_at = "done", time.time()
    corpus.set_task_status(*key, "done", run_id=run_id, records=res.records + res.duplicates)
    return res


def collect(corpus: Any, hardware: Hardware, config: TuneConfig, *, model: Any = None,
            tasks: Sequence[Task] | None = None, max_tasks: int | None = None, max_mflop: float | None = None,
            workloads: Collection[str] | None = None, zoo_kwargs: dict | None = None, graph: Graph = EXPORTED,
            show_progress: bool = True,
            on_task_done: Callable[[UnitOutcome], None] | None = None,
            tune: Callable[..., TuneSummary] = tune_task) -> CollectionSummary:
    """Collect the tasks of ``model`` (or the given ``tasks``) on ``hardware`` into ``corpus``,
    in this process (no Ray), one :func:`collect_unit` after another.

    ``max_tasks`` keeps the heaviest N tasks, ``max_mflop`` those of at most M million FLOPs,
    ``workloads`` those of these workload keys (``collectors.tasks.select_tasks``); ``graph``: the
    model's graph the tasks are cut from (``collectors.tasks.COMPILED``: the workloads a compile reads).
    ``on_task_done`` is called after each unit.
    KeyboardInterrupt stops the loop after marking the run "interrupted" and is re-raised.
    Raises ``UnknownWorkloads`` before any work when ``workloads`` names none of the tasks.
    Raises ``NotRunnableHere`` at once when this host cannot run code for ``hardware``.
    """
    if (model is None) == (tasks is None):
        raise ValueError("give exactly one of model= or tasks=")
    select_tasks([], max_tasks=max_tasks, max_mflop=max_mflop)  # bad bounds fail before any work
    check_runs_here(hardware)
    t0 = time.perf_counter()
    if tasks is None:
        tasks = extract_tasks(model, hardware, graph=graph, **(zoo_kwargs or {}))
    tasks = select_tasks(list(tasks), max_tasks=max_tasks, max_mflop=max_mflop, workloads=workloads)
    require_workloads_found(tasks, workloads, model if isinstance(model, str) else "the given tasks")
    corpus.register_hardware(hardware.key, target=hardware.target, description=hardware.description)
    register_tasks(corpus, tasks)
    params = {"model": model if isinstance(model, str) else None, "tasks": len(tasks),
              "hardware": hardware.key, "tuner": config.tuner_name, **config.params(),
              **({} if model is None else asdict(graph))}
    run_id = corpus.start_run("collect", params)
    result = CollectionSummary(run_id, "failed", tuner=config.tuner_name, trials=config.trials,
                               hardware_keys=[hardware.key])
    bar = CollectionProgress(len(tasks), hardware.key, enabled=show_progress)
    try:
        with bar:
            for task in tasks:
                outcome = collect_unit(corpus, task, hardware, config, run_id=run_id, tune=tune,
                                       on_batch=bar.records, progress=bar.trials)
                result.outcomes.append(outcome)
                bar.task_done(outcome)
                if on_task_done is not None:
                    on_task_done(outcome)
        result.status = run_status(result.outcomes)
    except KeyboardInterrupt:
        result.status = "interrupted"
        raise
    finally:
        result.wall_s = time.perf_counter() - t0
        corpus.finish_run(run_id, result.status)
    return result
