"""Runs and task status: what a collection (or training, ...) job did, kept in the index.

A *run* is one job: ``start_run`` opens it ("running"), ``finish_run`` closes it with a final
status. A *task status* row is one collection unit, (workload, hardware, tuner, trials), with the
run that did it; a resumed collection skips a unit whose status is "done", so re-running a job
measures only what is missing. ``run_summaries`` joins the two for ``tlm runs``: a task skipped
because an earlier run did it counts for that earlier run, so the numbers add up across runs.

The methods live in :class:`RunsMixin`, which :class:`storage.corpus.Corpus` inherits, so
``corpus.start_run(...)`` etc. stay the one entry point.
"""
from __future__ import annotations

import json
import logging
import uuid
from typing import Any, Mapping

import sqlalchemy as sa

from storage import index as ix
from storage.errors import CorpusError
from storage.schema import check_hardware_key, check_workload_key

log = logging.getLogger(__name__)

COUNTED_STATUSES = ("done", "failed")  # a task status outside these (e.g. "running") counts as failed in summaries


class RunsMixin:
    """Runs and task status of :class:`storage.corpus.Corpus` (mixed into it; uses its ``engine``)."""

    engine: sa.Engine

    # ------------------------------------------------------------------ task status
    def task_status(self, workload_key: str, hardware_key: str, tuner: str, trials: int) -> str | None:
        """Status of a (task, hardware, tuner, budget) collection unit ("done" when finished), or None."""
        t = ix.task_status.c
        with ix.read(self.engine) as conn:
            return conn.execute(
                sa.select(t.status).where(
                    t.workload_key == workload_key, t.hardware_key == hardware_key, t.tuner == tuner, t.trials == int(trials)
                )
            ).scalar_one_or_none()

    def set_task_status(
        self,
        workload_key: str,
        hardware_key: str,
        tuner: str,
        trials: int,
        status: str,
        *,
        run_id: str | None = None,
        records: int | None = None,
    ) -> None:
        """Set the status of a collection unit (upsert)."""
        check_workload_key(workload_key)
        check_hardware_key(hardware_key)
        key = {"workload_key": workload_key, "hardware_key": hardware_key, "tuner": tuner, "trials": int(trials)}
        values = {"status": status, "run_id": run_id, "records": records, "updated_at": ix.now()}
        ix.upsert(self.engine, ix.task_status, key, values)

    def task_statuses(self, *, run_id: str | None = None, hardware_key: str | None = None) -> list[dict]:
        """Every collection-unit status row (optionally of one run or hardware key), oldest update first."""
        t = ix.task_status
        q = sa.select(t).order_by(t.c.updated_at)
        if run_id is not None:
            q = q.where(t.c.run_id == run_id)
        if hardware_key is not None:
            q = q.where(t.c.hardware_key == hardware_key)
        with ix.read(self.engine) as conn:
            return [ix.utc_row(r) for r in conn.execute(q).mappings()]

    # ------------------------------------------------------------------ runs
    def start_run(self, kind: str, params: Mapping[str, Any] | None = None) -> str:
        """Open a run (collection, training, ...) and return its id."""
        run_id = uuid.uuid4().hex
        with ix.write(self.engine) as conn:
            conn.execute(
                sa.insert(ix.runs).values(
                    run_id=run_id, kind=kind, status="running", started_at=ix.now(),
                    params_json=json.dumps(dict(params or {}), sort_keys=True, default=str),
                )
            )
        log.debug("started %s run %s", kind, run_id)
        return run_id

    def finish_run(self, run_id: str, status: str = "done") -> None:
        """Close a run with a final status ("done", "failed", "interrupted", ...)."""
        with ix.write(self.engine) as conn:
            n = conn.execute(
                sa.update(ix.runs).where(ix.runs.c.run_id == run_id).values(status=status, finished_at=ix.now())
            ).rowcount
        if n != 1:
            raise CorpusError(f"unknown run id {run_id!r}")

    def runs(self) -> list[dict]:
        """Every run, oldest first, with its params decoded."""
        with ix.read(self.engine) as conn:
            rows = [ix.utc_row(r) for r in conn.execute(sa.select(ix.runs).order_by(ix.runs.c.started_at)).mappings()]
        for r in rows:
            r["params"] = json.loads(r.pop("params_json") or "{}")
        return rows

    def run_summaries(self, *, kind: str | None = None) -> list[dict]:
        """One row per run (of ``kind`` if given), oldest first, for ``tlm runs`` and dashboards.

        Keys: ``run_id``, ``kind``, ``status``, ``tasks_done``, ``tasks_failed`` (any status but
        "done"/"failed" counts as failed), ``records`` (of its done tasks), ``started_at`` (ISO 8601,
        seconds), ``seconds`` (up to now while still running), ``hardware`` (the run's
        ``params["hardware"]``). The counts come from the task status rows that name the run.
        """
        t = ix.task_status.c
        with ix.read(self.engine) as conn:
            counts = conn.execute(
                sa.select(t.run_id, t.status, sa.func.count(), sa.func.coalesce(sa.func.sum(t.records), 0))
                .where(t.run_id.is_not(None))
                .group_by(t.run_id, t.status)
            ).all()
        per_run: dict[str, dict[str, int]] = {}
        for run_id, status, n, records in counts:
            c = per_run.setdefault(run_id, {"done": 0, "failed": 0, "records": 0})
            c[status if status in COUNTED_STATUSES else "failed"] += int(n)
            if status == "done":
                c["records"] += int(records)
        rows = []
        for r in self.runs():
            if kind and r["kind"] != kind:
                continue
            c = per_run.get(r["run_id"], {"done": 0, "failed": 0, "records": 0})
            start, end = r.get("started_at"), r.get("finished_at")
            secs = ((end or ix.now()) - start).total_seconds() if start else None
            rows.append({
                "run_id": r["run_id"],
                "kind": r["kind"],
                "status": r["status"],
                "tasks_done": c["done"],
                "tasks_failed": c["failed"],
                "records": c["records"],
                "started_at": start.isoformat(timespec="seconds") if start else None,
                "seconds": round(secs, 1) if secs is not None else None,
                "hardware": r["params"].get("hardware"),
            })
        return rows
