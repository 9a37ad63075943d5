"""What a person watching a collection sees: a progress bar while it runs, a table after.

The collection protocol (:mod:`collectors.collect`) prints nothing itself; the local loop drives
a :class:`CollectionProgress` through the protocol's callbacks (records per batch, trials per
task, a task finished) and ``tlm collect`` prints :func:`summary_table` of the result.
"""
from __future__ import annotations

from typing import Any


class CollectionProgress:
    """A rich progress bar: tasks done, records stored, best latency so far (of this task)."""

    def __init__(self, total: int, hardware_key: str, *, enabled: bool) -> None:
        self.enabled = enabled
        self.total = total
        self.hardware_key = hardware_key
        self.n_records = 0
        self._done_records = 0  # records of finished units
        self.best: float | None = None
        self._new_task = False
        self._progress = None

    def __enter__(self) -> "CollectionProgress":
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

    def records(self, outcome: Any, batch: list) -> None:
        if self._new_task:
            self.best, self._new_task = None, False
        self.n_records = self._done_records + outcome.records
        for r in batch:
            if r.latency_s is not None and (self.best is None or r.latency_s < self.best):
                self.best = r.latency_s
        self._refresh()

    def trials(self, done: int, total: int, best: float | None) -> None:
        self._refresh(f"trials {done}/{total}")

    def task_done(self, outcome: Any) -> None:
        self._done_records += outcome.records
        self.n_records = self._done_records
        self._new_task = True  # keep showing the finished task's best until the next one measures
        if self._progress is not None:
            self._progress.advance(self._id)
        self._refresh()


def summary_table(result: Any) -> Any:
    """A rich Table of a ``collectors.collect.CollectionSummary``: one row per unit, totals in the caption."""
    from rich.table import Table

    keys = ",".join(result.hardware_keys)
    table = Table(title=f"collection {result.run_id[:8]} on {keys} "
                        f"({result.tuner}, {result.trials} trials): {result.status}")
    for col in ("task", "weight", "MFLOP", "status", "records", "errors", "best (us)", "GFLOP/s", "time (s)"):
        table.add_column(col, justify="left" if col in ("task", "status") else "right")
    for o in result.outcomes:
        best = o.best_latency_s
        gflops = (o.flops / best / 1e9) if best and o.flops else None
        ran = o.status not in ("skipped", "unplaceable")
        table.add_row(
            o.task_name, str(o.weight), f"{o.flops / 1e6:.2f}",
            o.status if not o.error else f"{o.status}: {o.error[:40]}",
            str(o.records), str(o.errors) if ran else "-",
            f"{best * 1e6:.1f}" if best else "-", f"{gflops:.1f}" if gflops else "-",
            f"{o.elapsed_s:.1f}" if ran else "-",
        )
    table.caption = (f"{result.count('done')} tuned, {result.count('skipped')} skipped (done before), "
                     f"{result.count('failed')} failed, {result.records} records stored, {result.wall_s:.0f} s")
    return table
