"""``tlm corpus``: look after the corpus of measured schedules.

    tlm corpus stats      [--corpus DIR] [--index-url URL] [--json]
    tlm corpus verify     [--corpus DIR] [--index-url URL]          exit 1 if a problem was found
    tlm corpus reindex    [--corpus DIR] [--index-url URL]          exit 1 if a part was quarantined
    tlm corpus merge      SRC [--src-index-url URL] [--corpus DIR] [--index-url URL]   exit 1 if SRC had bad parts
    tlm corpus import-ms  MS_DIR [--hardware-key KEY] [--corpus DIR] [--index-url URL]
    tlm corpus export-ms  OUT_DIR --hardware-key KEY [--all] [--workload KEY ...] [--overwrite]

``--corpus`` defaults to ``$TLM_CORPUS`` or ``./corpus``; ``--index-url`` to ``$TLM_INDEX_URL`` or
the SQLite file inside the corpus (:mod:`cluster.cli.options`). Bad input (wrong URL, bad hardware key, a directory that is
not a MetaSchedule database) prints one ``error:`` line and exits 2. ``verify`` and ``reindex``
need the collection to be stopped (they may move or rewrite parts).
"""
from __future__ import annotations

import argparse
import json
import sys

from cluster.cli.options import UsageError, add_corpus_options, open_corpus, user_errors


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``tlm corpus`` and its subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    add_corpus_options(common)

    p = subparsers.add_parser("corpus", help="inspect, check and move the corpus of measured schedules",
                              description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    s = sub.add_parser("stats", parents=[common], help="counts per hardware key")
    s.add_argument("--json", action="store_true", help="print the stats as JSON")
    s.set_defaults(func=_stats)

    v = sub.add_parser("verify", parents=[common], help="rehash every part; quarantine bad ones; report problems")
    v.set_defaults(func=_verify)

    r = sub.add_parser("reindex", parents=[common], help="rebuild the index from the part files alone")
    r.set_defaults(func=_reindex)

    m = sub.add_parser("merge", parents=[common], help="merge another corpus (e.g. another machine's) into this one",
                       description="Bring every record of SRC (checksums and record ids verified, duplicates "
                                   "skipped), its workloads, hardware keys, runs, task status and models into the "
                                   "corpus; merging twice adds nothing.")
    m.add_argument("src", help="the corpus directory (or URI) to merge from; it is only read")
    m.add_argument("--src-index-url", help="SRC's index, when it is not SRC/index.sqlite")
    m.set_defaults(func=_merge)

    i = sub.add_parser("import-ms", parents=[common], help="import a MetaSchedule JSON database directory")
    i.add_argument("ms_dir", help="directory with database_workload.json and database_tuning_record.json")
    i.add_argument("--hardware-key", help="hardware key of the records (derived from a CPU target if omitted)")
    i.set_defaults(func=_import_ms)

    e = sub.add_parser("export-ms", parents=[common], help="export records as a MetaSchedule JSON database")
    e.add_argument("out_dir", help="directory to write (must not already hold a database unless --overwrite)")
    e.add_argument("--hardware-key", required=True, help="which hardware's records to export")
    e.add_argument("--all", action="store_true", help="every successful record, not just the best per workload")
    e.add_argument("--workload", action="append", help="only this workload key (repeatable)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing database in OUT_DIR")
    e.set_defaults(func=_export_ms)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _stats(args: argparse.Namespace) -> int:
    with open_corpus(args) as c:
        st = c.stats()
    if args.json:
        print(json.dumps(st, indent=2, sort_keys=True))
        return 0
    print(f"corpus  {st['root']}")
    print(f"index   {st['index_url']}")
    rows = [("hardware", "records", "ok", "errors", "workloads", "parts", "size")]
    for hw, v in sorted(st["by_hardware"].items()):
        rows.append((hw, v["records"], v["ok"], v["errors"], v["workloads"], v["parts"], _human_bytes(v["bytes"])))
    rows.append(("total", st["records"], st["ok"], st["errors"], "", st["parts"], _human_bytes(st["bytes"])))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for n, r in enumerate(rows):
        print("  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(r, widths))))
        if n == 0 or n == len(rows) - 2:
            print("  ".join("-" * w for w in widths))
    print(f"registered: {st['workloads_registered']} workload(s), {st['hardware_registered']} hardware key(s), "
          f"{st['runs']} run(s), {st['models']} model(s)")
    return 0


def _print_report(action: str):
    """A command that runs ``Corpus.<action>()`` and prints its report (exit 1 on problems)."""

    def run(args: argparse.Namespace) -> int:
        with open_corpus(args) as c:
            report = getattr(c, action)()
        for line in report.lines():
            print(line)
        return 0 if report.ok else 1

    return run


_verify = _print_report("verify")
_reindex = _print_report("reindex")


def _merge(args: argparse.Namespace) -> int:
    import os

    from storage import Corpus, CorpusError, merge

    if "://" not in args.src and not args.src_index_url and not os.path.exists(os.path.join(args.src, "index.sqlite")):
        raise UsageError(f"{args.src!r} is not a corpus: no index.sqlite in it (give --src-index-url for a shared index)")
    with user_errors(CorpusError, ValueError), Corpus.open(args.src, args.src_index_url) as src, \
            open_corpus(args, create=True) as dest:
        if os.path.realpath(str(src.root)) == os.path.realpath(str(dest.root)):
            raise UsageError(f"cannot merge the corpus {args.src!r} into itself")
        report = merge(dest, src)
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


def _import_ms(args: argparse.Namespace) -> int:
    from collectors.ms_database import import_ms
    from storage import CorpusError

    with open_corpus(args, create=True) as c, user_errors(CorpusError, ValueError):
        rep = import_ms(c, args.ms_dir, hardware_key=args.hardware_key)
    print(f"read {rep.records} record(s) of {len(rep.workloads)} workload(s) for {', '.join(rep.hardware_keys) or '-'}: "
          f"{rep.stored} new, {rep.records - rep.stored} already stored, {rep.errors} failed measurement(s)")
    for w in rep.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _export_ms(args: argparse.Namespace) -> int:
    from collectors.ms_database import export_ms
    from storage import CorpusError

    with open_corpus(args) as c, user_errors(CorpusError, ValueError):
        rep = export_ms(c, args.out_dir, hardware_key=args.hardware_key, best_only=not args.all,
                        workload_keys=args.workload, overwrite=args.overwrite)
    print(f"wrote {rep.records} record(s) of {rep.workloads} workload(s) to {rep.directory}")
    for s in rep.skipped:
        print(f"skipped {s}", file=sys.stderr)
    return 1 if rep.skipped else 0
