"""``tlm runs``: the collection (and other) runs recorded in a corpus index.

One line per run: id, kind, status, tasks done/failed, records, start time and duration. The
task counts come from the index's ``task_status`` rows that name the run: a task skipped
because an earlier run did it counts for that earlier run, so the numbers add up across runs.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
from typing import Any


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list collection runs recorded in the corpus index",
        description="List runs (status, tasks done/failed, records, time) from the corpus index.",
    )
    p.add_argument("--corpus", required=True, help="corpus root directory")
    p.add_argument("--index-url", default=None, help="SQL index URL (default: sqlite in the corpus root)")
    p.add_argument("--kind", default=None, help="only runs of this kind (e.g. collect)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.set_defaults(func=run)


def run_rows(corpus: Any, kind: str | None = None) -> list[dict]:
    """Runs of ``corpus`` with their task and record counts, oldest first."""
    import sqlalchemy as sa
    from storage import index as ix  # thin read of task_status: Corpus has no per-run query yet

    t = ix.task_status.c
    with ix.read(corpus.engine) as conn:
        counts = conn.execute(
            sa.select(t.run_id, t.status, sa.func.count(), sa.func.coalesce(sa.func.sum(t.records), 0))
            .where(t.run_id.is_not(None))
            .group_by(t.run_id, t.status)
        ).all()
    per_run: dict[str, dict[str, int]] = {}
    for run_id, status, n, records in counts:
        c = per_run.setdefault(run_id, {"done": 0, "failed": 0, "records": 0})
        c[status if status in ("done", "failed") else "failed"] += int(n)
        if status == "done":
            c["records"] += int(records)
    rows = []
    for r in corpus.runs():
        if kind and r["kind"] != kind:
            continue
        c = per_run.get(r["run_id"], {"done": 0, "failed": 0, "records": 0})
        start, end = r.get("started_at"), r.get("finished_at")
        secs = ((end or _dt.datetime.now(_dt.timezone.utc)) - start).total_seconds() if start else None
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


def run(args: argparse.Namespace) -> int:
    from storage import Corpus

    corpus = Corpus.open(args.corpus, index_url=args.index_url)
    rows = run_rows(corpus, args.kind)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    if not rows:
        print(f"no runs in {args.corpus}")
        return 0
    head = f"{'run':12} {'kind':8} {'status':12} {'done':>5} {'failed':>6} {'records':>8} {'started (UTC)':20} {'secs':>8}  hardware"
    print(head)
    for r in rows:
        hw = ",".join(r["hardware"] or []) if isinstance(r["hardware"], list) else (r["hardware"] or "")
        print(
            f"{r['run_id'][:12]:12} {r['kind'][:8]:8} {r['status'][:12]:12} {r['tasks_done']:>5} "
            f"{r['tasks_failed']:>6} {r['records']:>8} {(r['started_at'] or '')[:19]:20} "
            f"{r['seconds'] if r['seconds'] is not None else '':>8}  {hw}"
        )
    return 0
