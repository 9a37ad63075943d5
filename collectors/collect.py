"""The local collection loop: tune each task of a model on this machine into a corpus.

One process, no Ray (the cluster package dispatches the same units to Ray actors). A unit
of work is (task, hardware, tuner, trials); a finished unit is marked "done" in the corpus
index and skipped when the loop runs again, so re-running resumes instead of starting over.
Records are appended as MetaSchedule measures them (one Parquet part per batch), so Ctrl-C
loses at most the batch in flight; a unit interrupted half-way is tuned again from the start
next time, and records it already stored are deduplicated by their ids.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from collectors.hardware import Hardware
from collectors.task import Task
from collectors.tasks import extract_tasks, register_tasks
from collectors.tuner import TuneConfig, TuneSummary, tune_task

logger = logging.getLogger(__name__)


@dataclass
class TaskOutcome:
    """What happened to one unit of work in this run."""

    task: Task
    status: str  # "tuned", "skipped" (already done), "failed"
    summary: TuneSummary | None = None
    stored: int = 0  # records newly written to the corpus (duplicates excluded)
    error: str | None = None


@dataclass
class CollectSummary:
    """The whole run: per-task outcomes and totals."""

    run_id: str
    hardware_key: str
    tuner: str
    trials: int
    outcomes: list[TaskOutcome] = field(default_factory=list)
    elapsed_s: float = 0.0
    status: str = "done"  # "done", "interrupted", "failed"

    @property
    def records(self) -> int:
        return sum(o.stored for o in self.outcomes)

    @property
    def tuned(self) -> int:
        return sum(1 for o in self.outcomes if o.status == "tuned")

    @property
    def skipped(self) -> int:
        return sum(1 for o in self.outcomes if o.status == "skipped")


def collect(corpus: Any, hardware: Hardware, config: TuneConfig, *, model: Any = None,
            tasks: Sequence[Task] | None = None, max_tasks: int | None = None,
            zoo_kwargs: dict | None = None, show_progress: bool = True,
            on_task_done: Callable[[TaskOutcome], None] | None = None,
            tune: Callable[..., TuneSummary] = tune_task) -> CollectSummary:
    """Tune the tasks of ``model`` (or the given ``tasks``) on ``hardware`` into ``corpus``.

    ``max_tasks`` keeps the heaviest N tasks. ``on_task_done`` is called after each unit.
    ``tune`` is the tuning function (``tune_task``; replaceable to wrap or count it).
    KeyboardInterrupt stops the loop after marking the run "interrupted" and is re-raised.
    """
    if (model is None) == (tasks is None):
        raise ValueError("give exactly one of model= or tasks=")
    if max_tasks is not None and max_tasks < 1:
        raise ValueError(f"max_tasks must be >= 1, got {max_tasks}")
    t0 = time.perf_counter()
    if tasks is None:
        tasks = extract_tasks(model, hardware, **(zoo_kwargs or {}))
    tasks = list(tasks)[:max_tasks] if max_tasks else list(tasks)
    corpus.register_hardware(hardware.key, target=hardware.target, description=hardware.description)
    register_tasks(corpus, tasks)
    params = {"model": model if isinstance(model, str) else None, "tasks": len(tasks),
              "hardware": hardware.key, "tuner": config.strategy, **config.params()}
    run_id = corpus.start_run("collect", params)
    result = CollectSummary(run_id, hardware.key, config.strategy, config.trials)
    bar = _Progress(len(tasks), hardware.key, enabled=show_progress)
    try:
        with bar:
            for task in tasks:
                outcome = _collect_one(corpus, hardware, config, task, run_id, bar, tune)
                result.outcomes.append(outcome)
                bar.task_done(outcome)
                if on_task_done is not None:
                    on_task_done(outcome)
    except KeyboardInterrupt:
        result.status = "interrupted"
        raise
    except BaseException:
        result.status = "failed"
        raise
    finally:
        result.elapsed_s = time.perf_counter() - t0
        if result.status == "done" and any(o.status == "failed" for o in result.outcomes):
            result.status = "failed"
        corpus.finish_run(run_id, result.status)
    return result


def _collect_one(corpus, hardware, config, task, run_id, bar, tune) -> TaskOutcome:
    key = (task.workload_key, hardware.key, config.strategy, config.trials)
    if corpus.task_status(*key) == "done":
        return TaskOutcome(task, "skipped")
    outcome = TaskOutcome(task, "tuned")
    corpus.set_task_status(*key, "running", run_id=run_id)

    def store(records: list[dict]) -> None:
        res = corpus.append(records)
        outcome.stored += res.rows
        bar.records(res.rows, records)

    try:
        outcome.summary = tune(task, hardware, config, on_records=store, run_id=run_id,
                               progress=bar.trials)
    except KeyboardInterrupt:
        corpus.set_task_status(*key, "interrupted", run_id=run_id, records=outcome.stored)
        raise
    except Exception as exc:  # noqa: BLE001 - one broken task must not end the collection
        logger.exception("tuning %s failed", task.task_name)
        corpus.set_task_status(*key, "failed", run_id=run_id, records=outcome.stored)
        outcome.status, outcome.error = "failed", f"{type(exc).__name__}: {exc}"
        return outcome
    corpus.set_task_status(*key, "done", run_id=run_id, records=outcome.stored)
    return outcome


class _Progress:
    """A rich progress bar: tasks done, records stored, best latency so far (of this task)."""

    def __init__(self, total: int, hardware_key: str, *, enabled: bool) -> None:
        self.enabled = enabled
        self.total = total
        self.hardware_key = hardware_key
        self.n_records = 0
        self.best: float | None = None
        self._new_task = False
        self._progress = None

    def __enter__(self) -> "_Progress":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=False,
            )
            self._progress.__enter__()
            self._id = self._progress.add_task(f"tasks on {self.hardware_key}", total=self.total, info="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def _refresh(self, extra: str = "") -> None:
        if self._progress is None:
            return
        best = f"{self.best * 1e6:.1f} us" if self.best is not None else "-"
        self._progress.update(self._id, info=f"records {self.n_records}  best(task) {best}  {extra}")

    def records(self, stored: int, batch: list[dict]) -> None:
        if self._new_task:
            self.best, self._new_task = None, False
        self.n_records += stored
        for r in batch:
            if r.get("latency_s") is not None and (self.best is None or r["latency_s"] < self.best):
                self.best = r["latency_s"]
        self._refresh()

    def trials(self, done: int, total: int, best: float | None) -> None:
        self._refresh(f"trials {done}/{total}")

    def task_done(self, outcome: TaskOutcome) -> None:
        self._new_task = True  # keep showing the finished task's best until the next one measures
        if self._progress is not None:
            self._progress.advance(self._id)
        self._refresh()


def summary_table(result: CollectSummary) -> Any:
    """A rich Table of the run: one row per task, totals in the caption."""
    from rich.table import Table

    table = Table(title=f"collection {result.run_id[:8]} on {result.hardware_key} "
                        f"({result.tuner}, {result.trials} trials): {result.status}")
    for col in ("task", "weight", "MFLOP", "status", "records", "errors", "best (us)", "GFLOP/s", "time (s)"):
        table.add_column(col, justify="left" if col in ("task", "status") else "right")
    for o in result.outcomes:
        s = o.summary
        best = s.best_latency_s if s else None
        gflops = (o.task.flops / best / 1e9) if best and o.task.flops else None
        table.add_row(
            o.task.task_name, str(o.task.weight), f"{o.task.flops / 1e6:.2f}",
            o.status if not o.error else f"failed: {o.error[:40]}",
            str(o.stored), str(s.errors) if s else "-",
            f"{best * 1e6:.1f}" if best else "-", f"{gflops:.1f}" if gflops else "-",
            f"{s.elapsed_s:.1f}" if s else "-",
        )
    table.caption = (f"{result.tuned} tuned, {result.skipped} skipped (done before), "
                     f"{result.records} records stored, {result.elapsed_s:.0f} s")
    return table
