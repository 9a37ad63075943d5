"""Integrity of a corpus: ``verify`` (are the registered parts what the index says?), ``reindex``
(rebuild the index from the parts alone) and quarantine (where a bad part goes).

The parts are the only truth; the index is a cache of what they hold. So a problem is always
resolved in favour of the files, and a bad file is moved to ``<root>/quarantine/``, never
deleted, with its index rows removed and its name in the report: nothing is skipped silently.

``reindex`` and the repair half of ``verify`` assume no writer is active (run them from the CLI
when the collection is stopped). ``verify`` rehashes every registered part; a missing, truncated
or corrupt one is quarantined (if present) and reported.

The methods live in :class:`IntegrityMixin`, which :class:`storage.corpus.Corpus` inherits, so
``corpus.verify()`` / ``corpus.reindex()`` stay the one entry point.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa

from storage import index as ix
from storage.errors import CorpusError
from storage.parts import PART_GLOB, TEMP_GLOB, hardware_of, part_created_at, read_part, sort_for_part, write_part

if TYPE_CHECKING:
    from storage.location import Location
    from storage.parts import PartRows

log = logging.getLogger(__name__)

QUARANTINE_DIR = "quarantine"  # under the corpus root; bad parts are moved here, never deleted
REINDEX_INSERT_ROWS = 50_000  # records rows per INSERT batch when rebuilding the index


@dataclass
class VerifyReport:
    """Result of ``Corpus.verify``: every problem by part name."""

    parts_checked: int = 0
    records_checked: int = 0
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # (part path, reason)
    missing: list[str] = field(default_factory=list)  # registered but absent; index rows removed
    unregistered: list[str] = field(default_factory=list)  # on disk, not in the index (run reindex)
    temp_files: list[str] = field(default_factory=list)  # leftovers of killed writers

    @property
    def ok(self) -> bool:
        return not (self.quarantined or self.missing or self.unregistered or self.temp_files)

    def lines(self) -> list[str]:
        """A person-readable summary, one problem per line."""
        out = [f"checked {self.parts_checked} part(s), {self.records_checked} record(s)"]
        out += [f"QUARANTINED {p}: {why}" for p, why in self.quarantined]
        out += [f"MISSING {p}: registered but not on disk; its index rows were removed" for p in self.missing]
        out += [f"UNREGISTERED {p}: complete part not in the index; run `tlm corpus reindex`" for p in self.unregistered]
        out += [f"TEMP {p}: leftover of an interrupted write; `tlm corpus reindex` removes it" for p in self.temp_files]
        out.append("OK" if self.ok else "PROBLEMS FOUND")
        return out


@dataclass
class ReindexReport:
    """Result of ``Corpus.reindex``."""

    parts: int = 0
    records: int = 0
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    rewritten: list[tuple[str, str]] = field(default_factory=list)  # (old part, new part) without duplicates
    temp_removed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.quarantined

    def lines(self) -> list[str]:
        out = [f"indexed {self.parts} part(s), {self.records} record(s)"]
        out += [f"QUARANTINED {p}: {why}" for p, why in self.quarantined]
        out += [f"REWROTE {a} as {b} without duplicate records" for a, b in self.rewritten]
        out += [f"REMOVED temp file {p}" for p in self.temp_removed]
        return out


class IntegrityMixin:
    """``verify`` and ``reindex`` of :class:`storage.corpus.Corpus` (mixed into it; not used alone).

    Relies on the host's ``engine``, ``_loc`` (the root's :class:`~storage.location.Location`),
    ``_parts`` (its :class:`~storage.parts.PartRows`), ``_registered_parts()`` and ``_hw_id()``.
    """

    engine: sa.Engine
    _loc: Location
    _parts: PartRows

    if TYPE_CHECKING:  # defined by Corpus (storage/corpus.py)
        def _registered_parts(self, hardware_key: str | None = None) -> list[dict]: ...
        def _hw_id(self, key: str, *, create: bool) -> int | None: ...

    def _quarantine(self, relpath: str) -> str:
        """Move a part to ``quarantine/`` (flattened name); return where it went."""
        dest = f"{QUARANTINE_DIR}/{relpath.replace('/', '__')}"
        self._loc.make_dir(QUARANTINE_DIR)
        self._loc.move(relpath, dest)
        return dest

    def _disk_parts(self) -> list[str]:
        return self._loc.glob(PART_GLOB)

    def _unregister_part(self, part: dict) -> None:
        """Remove a registered part's rows (part, records, cached payloads) from the index."""
        with ix.write(self.engine) as conn:
            gone = sa.select(ix.records.c.record_id).where(ix.records.c.part_id == part["part_id"])
            conn.execute(sa.delete(ix.top_payloads).where(ix.top_payloads.c.record_id.in_(gone)))
            conn.execute(sa.delete(ix.records).where(ix.records.c.part_id == part["part_id"]))
            conn.execute(sa.delete(ix.parts).where(ix.parts.c.part_id == part["part_id"]))
        self._parts.forget(part["path"])

    def _check_part(self, part: dict) -> str | None:
        """Why a present registered part is bad (hash, rows, unreadable), or None if it is sound."""
        rel = part["path"]
        digest = self._loc.sha256(rel)
        if digest != part["sha256"]:
            return f"sha256 {digest[:12]}... != registered {part['sha256'][:12]}... (corrupt or truncated)"
        try:
            n = pq.ParquetFile(self._loc.path(rel), filesystem=self._loc.fs).metadata.num_rows
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported
            return f"unreadable: {exc}"
        if n != part["rows"]:
            return f"{n} rows on disk, {part['rows']} registered"
        return None

    def verify(self) -> VerifyReport:
        """Rehash every registered part; quarantine bad ones (index rows removed); report all problems."""
        from tqdm import tqdm

        report = VerifyReport()
        registered = self._registered_parts()
        for part in tqdm(registered, desc="verify", unit="part", disable=len(registered) < 50):
            rel = part["path"]
            report.parts_checked += 1
            if not self._loc.exists(rel):
                report.missing.append(rel)
                self._unregister_part(part)
                continue
            reason = self._check_part(part)
            if reason is None:
                report.records_checked += part["rows"]
                continue
            self._unregister_part(part)
            moved = self._quarantine(rel)
            report.quarantined.append((rel, f"{reason}; moved to {moved}"))
            log.error("quarantined part %s: %s", rel, reason)
        known = {p["path"] for p in registered}
        report.unregistered = [p for p in self._disk_parts() if p not in known]
        report.temp_files = self._loc.glob(TEMP_GLOB)
        return report

    def reindex(self) -> ReindexReport:
        """Rebuild ``parts`` and ``records`` from the part files alone (no writer may be active).

        Parts are taken registered-first, then in creation order; a record id already seen in an
        earlier part is a duplicate (possible only after a crash between writing and registering,
        followed by a re-run): such a part is rewritten without those rows, or quarantined when
        nothing of it is new. So the parts already in the index always keep their rows. Unreadable
        parts are quarantined. Leftover temp files are removed.
        """
        from tqdm import tqdm

        report = ReindexReport()
        for tmp in self._loc.glob(TEMP_GLOB):
            self._loc.delete(tmp)
            report.temp_removed.append(tmp)
        try:  # the index may be gone or empty; it only decides which copy of a duplicate wins
            registered = {p["path"] for p in self._registered_parts()}
        except sa.exc.SQLAlchemyError:
            registered = set()
        candidates = []
        for rel in self._disk_parts():
            try:
                candidates.append((rel not in registered, part_created_at(self._loc, rel), rel))
            except Exception as exc:  # noqa: BLE001
                report.quarantined.append((rel, f"unreadable footer: {exc}; moved to {self._quarantine(rel)}"))
        candidates.sort()
        seen: set[str] = set()
        parts_rows: list[dict] = []
        rec_rows: list[tuple] = []
        for _, created_at, rel in tqdm(candidates, desc="reindex", unit="part", disable=len(candidates) < 50):
            try:
                table = read_part(self._loc, rel)
                hw = hardware_of(rel)
                if pc.any(pc.not_equal(table["hardware_key"], hw)).as_py():
                    raise CorpusError(f"holds records of another hardware key than {hw}")
            except Exception as exc:  # noqa: BLE001 - report, never skip silently
                report.quarantined.append((rel, f"unreadable: {exc}; moved to {self._quarantine(rel)}"))
                continue
            ids = table["record_id"].to_pylist()
            dup = [i in seen for i in ids]
            if any(dup):
                keep = table.filter(pa.array([not d for d in dup]))
                if keep.num_rows == 0:
                    report.quarantined.append((rel, f"all {len(ids)} records duplicate earlier parts; moved to {self._quarantine(rel)}"))
                    continue
                info = write_part(self._loc, hw, sort_for_part(keep), created_at)
                moved = self._quarantine(rel)
                report.rewritten.append((rel, info.path))
                log.warning("part %s held %d duplicate record(s): rewrote it as %s (old one in %s)", rel, sum(dup), info.path, moved)
                rel, table = info.path, read_part(self._loc, info.path)
                ids = table["record_id"].to_pylist()
            seen.update(ids)
            part_id = len(parts_rows) + 1
            parts_rows.append(
                {"part_id": part_id, "path": rel, "hardware_key": hw, "rows": table.num_rows, "sha256": self._loc.sha256(rel),
                 "bytes": self._loc.size(rel), "created_at": created_at}
            )
            hid = self._hw_id(hw, create=True)
            for i, (rid, wk, lat) in enumerate(zip(ids, table["workload_key"].to_pylist(), table["latency_s"].to_pylist())):
                rec_rows.append((rid, wk, hid, lat, part_id, i))
        self._replace_index(parts_rows, rec_rows)
        report.parts, report.records = len(parts_rows), len(rec_rows)
        return report

    def _replace_index(self, parts_rows: list[dict], rec_rows: list[tuple]) -> None:
        """Swap the index's ``parts`` and ``records`` for the rebuilt ones in one transaction."""
        with ix.write(self.engine) as conn:
            conn.execute(sa.delete(ix.records))
            conn.execute(sa.delete(ix.parts))
            conn.execute(sa.delete(ix.top_payloads))  # a cache: rebuilt by later appends, top_k falls back meanwhile
            if parts_rows:
                conn.execute(sa.insert(ix.parts), parts_rows)
            for i in range(0, len(rec_rows), REINDEX_INSERT_ROWS):
                ix.insert_records(conn, rec_rows[i : i + REINDEX_INSERT_ROWS])
            if conn.dialect.name == "postgresql" and parts_rows:
                conn.exec_driver_sql(
                    "SELECT setval(pg_get_serial_sequence('parts', 'part_id'), (SELECT MAX(part_id) FROM parts))"
                )
        self._parts.forget()
