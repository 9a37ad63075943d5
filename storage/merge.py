"""Merging one corpus into another: machines that share no disk bring their slices together.

A corpus collected on a machine of its own (another CPU, another site) travels as a directory
(parts + index). :func:`merge` brings everything it holds into a destination corpus:

- **records**, part by part: each source part is first checked against the checksum and row
  count its index registered (a corrupt or truncated part is skipped and reported, never merged),
  then every record's id is recomputed from its content (a record whose id does not match is
  skipped and reported: ids are how duplicates are recognised, so a wrong one would break
  "stored once"); the rest goes through :meth:`Corpus.append`, which drops ids already stored.
  So merging twice, or merging a corpus that overlaps the destination, adds nothing twice.
- **workloads** (TVMScript, module JSON, FLOPs) and the models they occur in: new ones added; for
  a workload both hold, only the fields the destination lacks are filled in.
- **hardware keys** (target, description), **runs**, **task status** rows and **registered models**:
  added when absent (a task unit "done" in the source becomes "done" in the destination, so a
  later collection does not measure it again); what the destination already holds is kept.

Appends are batched (``BATCH_ROWS`` per part) so a 136-part source does not become 136 small
parts. Only registered source parts count: an unregistered part (a crash before its index commit)
is not part of the source corpus until its owner runs ``reindex``; it is reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import sqlalchemy as sa

from storage import index as ix
from storage.parts import hardware_of, read_part
from storage.schema import make_record_id

if TYPE_CHECKING:
    from storage.corpus import Corpus

BATCH_ROWS = 50_000  # records per destination part when merging
WORKLOAD_FIELDS = ("task_name", "tvmscript", "mod_json", "flops", "op_kind")


@dataclass
class MergeReport:
    """What :func:`merge` read, added and skipped (counts per kind; skipped parts with reasons)."""

    source: str
    parts_read: int = 0
    records_read: int = 0
    records_added: int = 0
    records_present: int = 0  # already in the destination (by id): skipped
    added_by_hardware: dict[str, int] = field(default_factory=dict)
    bad_parts: list[tuple[str, str]] = field(default_factory=list)  # (path, why): not merged
    bad_ids: int = 0  # records whose id does not match their content: not merged
    unregistered_parts: list[str] = field(default_factory=list)
    workloads_added: int = 0
    workloads_filled: int = 0
    workload_models_added: int = 0
    hardware_added: list[str] = field(default_factory=list)
    runs_added: int = 0
    task_status_added: int = 0
    models_added: int = 0

    @property
    def ok(self) -> bool:
        """True when everything the source registered was readable and consistent."""
        return not self.bad_parts and not self.bad_ids

    def lines(self) -> list[str]:
        """The report as lines for a person."""
        added = ", ".join(f"{k} {v}" for k, v in sorted(self.added_by_hardware.items())) or "none"
        out = [
            f"merged {self.source}: {self.parts_read} part(s), {self.records_read} record(s) read",
            f"records: {self.records_added} added ({added}), {self.records_present} already present",
            f"workloads: {self.workloads_added} added, {self.workloads_filled} filled in; "
            f"{self.workload_models_added} model occurrence(s) added",
            f"hardware keys added: {', '.join(self.hardware_added) or 'none'}; runs added: {self.runs_added}; "
            f"task status rows added: {self.task_status_added}; models added: {self.models_added}",
        ]
        out += [f"skipped part {p}: {why}" for p, why in self.bad_parts]
        if self.bad_ids:
            out.append(f"skipped {self.bad_ids} record(s) whose id does not match their content")
        if self.unregistered_parts:
            out.append(f"not merged: {len(self.unregistered_parts)} unregistered part(s) in the source "
                       f"(run `tlm corpus reindex` there first), e.g. {self.unregistered_parts[0]}")
        return out


def merge(dest: "Corpus", source: "Corpus") -> MergeReport:
    """Merge every record and registration of ``source`` into ``dest`` (module docstring).

    The source is only read. Safe to repeat and to interrupt: records are appended idempotently
    and every registration is an insert-if-absent, so a rerun finishes what a stopped one began.
    """
    report = MergeReport(source=repr(source))
    _merge_hardware(dest, source, report)
    _merge_workloads(dest, source, report)
    _merge_records(dest, source, report)
    _merge_rows(dest, source, ix.runs, ("run_id",), report, "runs_added")
    _merge_task_status(dest, source, report)
    _merge_rows(dest, source, ix.models, ("model_id",), report, "models_added")
    return report


def _merge_hardware(dest: "Corpus", source: "Corpus", report: MergeReport) -> None:
    for key in sorted(_keys(source, ix.hardware.c.key)):
        if dest.hardware_info(key) is None:
            info = source.hardware_info(key) or {}
            dest.register_hardware(key, target=info.get("target"), description=info.get("description") or "")
            report.hardware_added.append(key)


def _merge_workloads(dest: "Corpus", source: "Corpus", report: MergeReport) -> None:
    have = {w["workload_key"]: w for w in dest.workloads()}
    for w in source.workloads():
        mine = have.get(w["workload_key"])
        values = {f: w[f] for f in WORKLOAD_FIELDS if w.get(f) is not None and (mine is None or mine.get(f) is None)}
        if mine is None or values:
            dest.register_workload(w["workload_key"], **values)
            report.workloads_added += mine is None
            report.workloads_filled += mine is not None
        for model, weight in w["models"].items():
            if model not in (mine or {}).get("models", {}):
                dest.register_workload_model(w["workload_key"], model=model, weight=weight)
                report.workload_models_added += 1


def _merge_records(dest: "Corpus", source: "Corpus", report: MergeReport) -> None:
    pending: list[pa.Table] = []

    def flush() -> None:
        if not pending:
            return
        res = dest.append(pa.concat_tables(pending))
        for path in res.part_paths:
            hw = hardware_of(path)
            report.added_by_hardware[hw] = report.added_by_hardware.get(hw, 0) + dest._rows_of(path)
        report.records_added += res.rows
        report.records_present += res.duplicates
        pending.clear()

    registered = source._registered_parts()
    for part in registered:
        rel = part["path"]
        why = "missing" if not source._loc.exists(rel) else source._check_part(part)
        if why:
            report.bad_parts.append((rel, why))
            continue
        table = read_part(source._loc, rel)
        report.parts_read += 1
        report.records_read += table.num_rows
        good = [make_record_id(w, h, t) == r for r, w, h, t in zip(
            *(table[c].to_pylist() for c in ("record_id", "workload_key", "hardware_key", "trace_json")))]
        if not all(good):
            report.bad_ids += good.count(False)
            table = table.filter(pa.array(good))
        pending.append(table)
        if sum(t.num_rows for t in pending) >= BATCH_ROWS:
            flush()
    flush()
    known = {p["path"] for p in registered}
    report.unregistered_parts = [p for p in source._disk_parts() if p not in known]


def _merge_rows(dest: "Corpus", source: "Corpus", table: sa.Table, key: tuple[str, ...],
                report: MergeReport, counter: str) -> int:
    """Insert the rows of ``table`` whose ``key`` the destination lacks; count them in ``report``."""
    with ix.read(dest.engine) as conn:
        have = {tuple(r) for r in conn.execute(sa.select(*(table.c[k] for k in key)))}
    with ix.read(source.engine) as conn:
        rows = [ix.utc_row(r) for r in conn.execute(sa.select(table)).mappings()]
    new = [r for r in rows if tuple(r[k] for k in key) not in have]
    if new:
        with ix.write(dest.engine) as conn:
            conn.execute(sa.insert(table), new)
    setattr(report, counter, getattr(report, counter) + len(new))
    return len(new)


def _merge_task_status(dest: "Corpus", source: "Corpus", report: MergeReport) -> None:
    """Absent units are added; a unit done in the source and not in the destination becomes done."""
    key = ("workload_key", "hardware_key", "tuner", "trials")
    _merge_rows(dest, source, ix.task_status, key, report, "task_status_added")
    for row in source.task_statuses():
        if row["status"] == "done" and dest.task_status(*(row[k] for k in key)) != "done":
            dest.set_task_status(*(row[k] for k in key), "done", run_id=row["run_id"], records=row["records"])


def _keys(corpus: "Corpus", column: sa.Column) -> set[str]:
    with ix.read(corpus.engine) as conn:
        return set(conn.execute(sa.select(column)).scalars())

