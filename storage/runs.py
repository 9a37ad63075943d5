"""Runs and task status: what a collection (or training, ...) job did, kept in the index.

A *run* is one job: ``start_run`` opens it ("running"), ``finish_run`` closes it with a final
status. A *task status* row is one collection unit, (workload, hardware, tuner, trials), with the
run that did it; a resumed collection skips a unit whose status is "done", so re-running a job
measures only what is missing. ``run_summaries`` joins the two for ``tlm runs``: a task skipped
because an earlier run did it counts for that earlier run, so the numbers add up across runs.

The methods live in :class:`RunsMixin`, which :class:`storage.corpus.Corpus` inherits, so
``corpus.start_run(...)`` etc. stay the one entry point.

A run's driver can die without a word (SIGKILL, a lost machine): nothing then closes the run, and
it would read "running" forever. So every run records its *driver* (host, pid and the process's
start time, which a reused pid does not share), and :meth:`RunsMixin.reap_orphaned_runs` marks
a "running" run whose driver is gone "interrupted", with its units still "running" too. It runs
when the next run starts and when ``tlm runs`` lists them. Only the driver's own host can tell
whether it is alive: a run driven from another host is left as it is.
"""
from __future__ import annotations

import json
import logging
import os
import socket
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
        only_from: tuple[str, ...] | None = None,
    ) -> bool:
        """Set the status of a collection unit (upsert); whether it was written.

        ``only_from``: change an existing row only while its status is one of these. A collector
        killed with its job fails on the way out (its build and run workers die first); its
        "failed" must not overwrite the "interrupted" the job's driver already recorded.
        """
        check_workload_key(workload_key)
        check_hardware_key(hardware_key)
        key = {"workload_key": workload_key, "hardware_key": hardware_key, "tuner": tuner, "trials": int(trials)}
        values = {"status": status, "run_id": run_id, "records": records, "updated_at": ix.now()}
        if only_from is None:
            ix.upsert(self.engine, ix.task_status, key, values)
            return True
        t = ix.task_status
        cond = sa.and_(*(t.c[k] == v for k, v in key.items()), t.c.status.in_(only_from))
        with ix.write(self.engine) as conn:
            return conn.execute(sa.update(t).where(cond).values(**values)).rowcount > 0

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
        """Open a run (collection, training, ...) driven by this process and return its id; runs
        of this host whose driver is gone are marked "interrupted" first."""
        self.reap_orphaned_runs()
        run_id = uuid.uuid4().hex
        with ix.write(self.engine) as conn:
            conn.execute(
                sa.insert(ix.runs).values(
                    run_id=run_id, kind=kind, status="running", started_at=ix.now(),
                    params_json=json.dumps(dict(params or {}), sort_keys=True, default=str),
                    driver_json=json.dumps(this_driver()),
                )
            )
        log.debug("started %s run %s", kind, run_id)
        return run_id

    def reap_orphaned_runs(self) -> list[str]:
        """Mark "interrupted" every "running" run whose driver ran on this host and is gone, with
        its units still marked "running"; returns their ids. A run whose driver is alive, ran on
        another host or is unknown (an index older than schema version 3) is left alone."""
        r = ix.runs.c
        with ix.read(self.engine) as conn:
            running = conn.execute(sa.select(r.run_id, r.driver_json).where(r.status == "running")).all()
        gone = [run_id for run_id, driver in running if driver and driver_alive(json.loads(driver)) is False]
        if not gone:
            return []
        t = ix.task_status.c
        with ix.write(self.engine) as conn:
            conn.execute(sa.update(ix.runs).where(r.run_id.in_(gone), r.status == "running")
                         .values(status="interrupted", finished_at=ix.now()))
            conn.execute(sa.update(ix.task_status).where(t.run_id.in_(gone), t.status == "running")
                         .values(status="interrupted", updated_at=ix.now()))
        log.info("marked %d run(s) whose driver is gone as interrupted: %s", len(gone), ", ".join(gone))
        return gone

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


def this_driver() -> dict:
    """What identifies this process as a run's driver: its host, pid and start (``None`` where
    the OS does not tell; then only the pid is checked)."""
    return {"host": _host(), "pid": os.getpid(), "start": _process_start(os.getpid())}


def driver_alive(driver: Mapping[str, Any]) -> bool | None:
    """Whether the process ``driver`` names still runs: None when it ran on another host (this
    one cannot tell). A pid reused by another process, or a driver from before a reboot, is not
    the driver (its start differs)."""
    if driver.get("host") != _host():
        return None
    pid = int(driver["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    stat = process_stat(pid)
    if stat is not None and stat[0] == "Z":  # exited, not yet waited for by its parent
        return False
    start = driver.get("start")
    return start is None or (stat is not None and stat[1] == start)


def _process_start(pid: int) -> str | None:
    """The process's start on Linux (this boot's id and its start time in clock ticks since
    boot); None elsewhere."""
    stat = process_stat(pid)
    return stat[1] if stat else None


def process_stat(pid: int) -> tuple[str, str] | None:
    """(state, start) of a live process from ``/proc/PID/stat`` (fields 3 and 22, the start with
    this boot's id); None where it is gone or the OS does not tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except (OSError, IndexError):
        return None
    return fields[0], f"{boot}:{fields[19]}"


def _host() -> str:
    """This machine: its host name and, where the OS keeps one, its machine id (two containers
    may share a host name; a reboot keeps both)."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                return f"{socket.gethostname()}/{f.read().strip()}"
        except OSError:
            continue
    return socket.gethostname()
