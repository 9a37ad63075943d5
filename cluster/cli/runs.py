"""``tlm runs``: the collection (and other) runs recorded in a corpus index.

One line per run: id, kind, status, tasks done/failed, records, start time and duration, from
``Corpus.run_summaries`` (storage/runs.py says how the task counts add up across runs). A run
whose driver on this host is gone (killed) is marked "interrupted" first.
"""
from __future__ import annotations

import argparse
import json

from cluster.cli.options import add_corpus_options, corpus_root, open_corpus


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list collection runs recorded in the corpus index",
        description="List runs (status, tasks done/failed, records, time) from the corpus index.",
    )
    add_corpus_options(p)
    p.add_argument("--kind", default=None, help="only runs of this kind (e.g. collect)")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with open_corpus(args) as corpus:
        corpus.reap_orphaned_runs()
        rows = corpus.run_summaries(kind=args.kind)
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    if not rows:
        print(f"no runs in {corpus_root(args)}")
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
