"""The corpus: Parquet parts (the data) + a SQL index (what exists, where, how fast).

How an append stays correct with many writers (processes on one machine or, with PostgreSQL
and a shared directory, many machines), using the SQL index as the single arbiter:

1. Validate and normalise the records (``storage.schema``), drop repeated ids within the batch.
2. Ask the index which ids already exist; drop them (re-running a collection stores nothing new).
3. Write the remaining rows as a durable part per hardware key (``storage.parts``: temp name,
   fsync, rename, fsync dir; under a URI root: temp key, move). Readers of the index do not see it yet.
4. In ONE transaction insert the ``parts`` row(s) and every ``records`` row (primary key
   ``record_id``). If another writer registered some of the same ids between 2 and 4, the
   primary key refuses the transaction (nothing of it is kept); we re-check which ids are now
   present, write a new part holding only the new rows, delete the old file, and retry.
   So a registered part contains exactly the rows the index attributes to it: no record is
   lost (every id is either ours or already stored) and none is duplicated (the key forbids it).

A crash between 3 and 4 leaves a complete but unregistered part: invisible to ``scan`` and
``top_k`` (they read only registered parts), reported by ``verify``, registered by ``reindex``.
A crash during 3 leaves a hidden ``.tmp`` file that no reader sees; ``reindex`` deletes it.

``top_k`` ranks with the index (``ix_records_topk``) and returns whole records: those among the
fastest ``TOP_CACHE`` of their workload when appended come from ``top_payloads`` in the index
(written in the append's transaction); any other is read from its part's row group (rows in a
part are sorted by workload and latency, so that is one small read per part).

``reindex`` and the repair half of ``verify`` assume no writer is active (run them from the CLI
when the collection is stopped). ``verify`` rehashes every registered part; a missing, truncated
or corrupt one is moved to ``<root>/quarantine/`` (if present), its index rows removed, and it is
named in the report. Nothing is ever skipped silently.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import threading
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import sqlalchemy as sa

from storage import index as ix
from storage.errors import CorpusError, SchemaMismatch
from storage.location import Location
from storage.parts import (
    PART_GLOB,
    TEMP_GLOB,
    PartInfo,
    hardware_of,
    part_created_at,
    read_part,
    sort_for_part,
    write_part,
)
from storage.schema import RECORD_SCHEMA, check_hardware_key, check_workload_key, to_record_table

log = logging.getLogger(__name__)

QUARANTINE_DIR = "quarantine"  # under the corpus root; bad parts are moved here, never deleted
ID_CHUNK = 5000  # ids per "IN (...)" query: under every backend's bound-parameter limit
MAX_REGISTER_ATTEMPTS = 20  # retries of step 4 above before giving up (each one means real contention)
OPEN_FILES = 64  # Parquet footers kept open for top_k
TOP_CACHE = 16  # fastest records per (workload, hardware) whose full row is cached in the index for top_k


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _utc(row: Mapping[str, Any]) -> dict:
    """A row as a dict with every datetime timezone-aware UTC (SQLite hands back naive ones)."""
    return {
        k: (v.replace(tzinfo=_dt.timezone.utc) if isinstance(v, _dt.datetime) and v.tzinfo is None else v)
        for k, v in row.items()
    }


@dataclass(frozen=True)
class AppendResult:
    """What one ``append`` stored: the new part (None if every record was already stored)."""

    part_path: str | None  # relative to the corpus root; the first one when several hardware keys
    rows: int  # records newly stored
    duplicates: int  # records dropped because their id was already stored (or repeated in the batch)
    part_paths: tuple[str, ...] = ()  # every part written (one per hardware key in the batch)


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


class Corpus:
    """A corpus of measured schedules rooted at a directory or a ``pyarrow.fs`` URI, indexed in a
    SQL database.

    Open it with :meth:`Corpus.open`. Instances are cheap and safe to use from several threads
    for reading; writers in several processes coordinate through the index (module docstring).
    ``root`` is a ``Path`` for a plain path and the URI string for a URI root; ``filesystem`` and
    ``fs_path`` locate parts for readers outside this class (``pyarrow.dataset``, Ray Data).
    """

    def __init__(self, location: Location, engine: sa.Engine, url: str) -> None:
        self._loc = location
        self.root: Path | str = location.root
        self.engine = engine
        self.index_url = ix.safe_url(url)  # for display: password hidden
        self._url = url
        self._files: OrderedDict[str, tuple[pq.ParquetFile, list[int]]] = OrderedDict()
        self._hw_ids: dict[str, int] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, root: str | os.PathLike, index_url: str | None = None) -> "Corpus":
        """Open (creating if needed) the corpus at ``root``; index at ``index_url`` or ``<root>/index.sqlite``.

        ``root`` is a local path or a URI ``pyarrow.fs.FileSystem.from_uri`` understands
        (``file:///...``, ``s3://bucket/prefix``, ``gs://...``, ``hdfs://...``); a URI other than
        ``file://`` needs ``index_url`` (``storage.location`` says what each root guarantees).
        """
        location, url = Location.open(root, index_url)
        engine = ix.create_engine(url)
        ix.ensure_schema(engine)
        return cls(location, engine, url)

    @property
    def filesystem(self) -> pafs.FileSystem:
        """The ``pyarrow.fs`` filesystem holding the parts (``LocalFileSystem`` for a plain path)."""
        return self._loc.fs

    def fs_path(self, relpath: str = "") -> str:
        """Path inside :attr:`filesystem` of a part path from the index (or of the root)."""
        return self._loc.path(relpath)

    def __reduce__(self):
        """Pickle as "open the same corpus again" (engines and open files don't travel), so a
        Corpus can be handed to Ray tasks and actors; the receiver reconnects on arrival."""
        return (Corpus.open, (str(self.root), self._url))

    def close(self) -> None:
        """Release database connections and open files."""
        with self._lock:
            self._files.clear()
        self.engine.dispose()

    def __enter__(self) -> "Corpus":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Corpus(root={self._loc.display!r}, index_url={self.index_url!r})"

    # ------------------------------------------------------------------ registration
    def _upsert(self, table: sa.Table, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        cond = sa.and_(*(table.c[k] == v for k, v in key.items()))
        for _ in range(MAX_REGISTER_ATTEMPTS):
            try:
                with ix.write(self.engine) as conn:
                    if conn.execute(sa.select(sa.literal(1)).select_from(table).where(cond)).first():
                        if values:
                            conn.execute(sa.update(table).where(cond).values(**values))
                    else:
                        conn.execute(sa.insert(table).values(**key, **values))
                return
            except sa.exc.IntegrityError:  # a concurrent insert of the same key: update it instead
                continue
        raise CorpusError(f"could not write {table.name} row {dict(key)} after {MAX_REGISTER_ATTEMPTS} attempts")

    def register_workload(
        self,
        workload_key: str,
        *,
        task_name: str | None = None,
        tvmscript: str | None = None,
        flops: float | None = None,
        op_kind: str | None = None,
        mod_json: str | None = None,
    ) -> None:
        """Record a workload (idempotent; fields given as None keep their stored value)."""
        check_workload_key(workload_key)
        values = {"task_name": task_name, "tvmscript": tvmscript, "flops": flops, "op_kind": op_kind, "mod_json": mod_json}
        values = {k: v for k, v in values.items() if v is not None}
        exists = self.workload(workload_key) is not None
        self._upsert(ix.workloads, {"workload_key": workload_key}, values if exists else {**values, "created_at": _now()})

    def register_workload_model(self, workload_key: str, *, model: str, weight: float = 1.0) -> None:
        """Record that ``workload_key`` occurs ``weight`` times in ``model``."""
        check_workload_key(workload_key)
        self._upsert(ix.workload_models, {"workload_key": workload_key, "model": model}, {"weight": float(weight)})

    def register_hardware(self, key: str, *, target: Mapping[str, Any] | None = None, description: str = "") -> None:
        """Record a hardware key with its TVM target (dict form) and a human description."""
        check_hardware_key(key)
        values: dict[str, Any] = {"description": description}
        if target is not None:
            values["target_json"] = json.dumps(dict(target), sort_keys=True)
        if self.hardware_info(key) is None:
            values["created_at"] = _now()
        self._upsert(ix.hardware, {"key": key}, values)

    def workload(self, workload_key: str) -> dict | None:
        """The stored row of a workload, or None."""
        with ix.read(self.engine) as conn:
            row = conn.execute(sa.select(ix.workloads).where(ix.workloads.c.workload_key == workload_key)).mappings().first()
        return _utc(row) if row else None

    def workloads(self) -> list[dict]:
        """Every registered workload (with the models it occurs in and their weights)."""
        with ix.read(self.engine) as conn:
            rows = [_utc(r) for r in conn.execute(sa.select(ix.workloads).order_by(ix.workloads.c.workload_key)).mappings()]
            occ = conn.execute(sa.select(ix.workload_models)).mappings().all()
        by_key: dict[str, dict[str, float]] = {}
        for o in occ:
            by_key.setdefault(o["workload_key"], {})[o["model"]] = o["weight"]
        for r in rows:
            r["models"] = by_key.get(r["workload_key"], {})
        return rows

    def hardware_info(self, key: str) -> dict | None:
        """The stored row of a hardware key (target decoded), or None."""
        with ix.read(self.engine) as conn:
            row = conn.execute(sa.select(ix.hardware).where(ix.hardware.c.key == key)).mappings().first()
        if not row:
            return None
        out = _utc(row)
        out["target"] = json.loads(out["target_json"]) if out["target_json"] else None
        return out

    def _hw_id(self, key: str, *, create: bool) -> int | None:
        """The small integer standing for a hardware key in ``records`` (created on first use)."""
        hid = self._hw_ids.get(key)
        if hid is not None:
            return hid
        t = ix.hardware_ids
        for _ in range(MAX_REGISTER_ATTEMPTS):
            with self.engine.connect() as conn:
                hid = conn.execute(sa.select(t.c.hw_id).where(t.c.key == key)).scalar_one_or_none()
            if hid is not None or not create:
                break
            try:
                with ix.write(self.engine) as conn:
                    conn.execute(sa.insert(t).values(key=key))
            except sa.exc.IntegrityError:  # another writer created it first
                pass
        if hid is not None:
            self._hw_ids[key] = hid
        return hid

    # ------------------------------------------------------------------ append
    def append(self, records: "list[dict] | pa.Table") -> AppendResult:
        """Store records; ids already stored are skipped (idempotent). See the module docstring.

        An empty batch (a tuning round that measured nothing) is no error: it stores nothing.
        """
        if isinstance(records, list) and not records:
            return AppendResult(None, 0, 0)
        table = to_record_table(records)
        n_in = table.num_rows
        if n_in == 0:
            return AppendResult(None, 0, 0)
        table = _first_of_each_id(table)
        written: list[str] = []
        for hw in sorted(pc.unique(table["hardware_key"]).to_pylist()):
            sub = table.filter(pc.equal(table["hardware_key"], hw))
            path = self._append_one_hardware(hw, sub)
            if path:
                written.append(path)
        stored = sum(self._rows_of(p) for p in written)
        return AppendResult(written[0] if written else None, stored, n_in - stored, tuple(written))

    def _rows_of(self, path: str) -> int:
        with ix.read(self.engine) as conn:
            return conn.execute(sa.select(ix.parts.c.rows).where(ix.parts.c.path == path)).scalar_one()

    def _drop_existing(self, table: pa.Table) -> pa.Table:
        with ix.read(self.engine) as conn:
            have = ix.existing_record_ids(conn, table["record_id"].to_pylist(), ID_CHUNK)
        if not have:
            return table
        return table.filter(pc.invert(pc.is_in(table["record_id"], pa.array(sorted(have), pa.string()))))

    def _append_one_hardware(self, hw: str, table: pa.Table) -> str | None:
        table = sort_for_part(self._drop_existing(table))
        for _ in range(MAX_REGISTER_ATTEMPTS):
            if table.num_rows == 0:
                return None
            info = write_part(self._loc, hw, table, _now())
            try:
                self._register(info, table)
                return info.path
            except (sa.exc.IntegrityError, sa.exc.OperationalError) as exc:
                # Another writer stored some of these ids meanwhile (or a deadlock was broken):
                # the part was not registered; rebuild it from the rows still new and retry.
                log.debug("registration of %s refused (%s); retrying without stored ids", info.path, type(exc).__name__)
                self._loc.delete(info.path)
                table = self._drop_existing(table)
        raise CorpusError(f"could not register a part for {hw} after {MAX_REGISTER_ATTEMPTS} attempts (heavy contention?)")

    def _register(self, info: PartInfo, table: pa.Table) -> None:
        """Insert the part row and its records rows in one transaction."""
        n = table.num_rows
        hw = self._hw_id(info.hardware_key, create=True)
        cols = zip(table["record_id"].to_pylist(), table["workload_key"].to_pylist(), table["latency_s"].to_pylist())
        with ix.write(self.engine) as conn:
            part_id = conn.execute(
                sa.insert(ix.parts).values(
                    path=info.path,
                    hardware_key=info.hardware_key,
                    rows=n,
                    sha256=info.sha256,
                    bytes=info.bytes,
                    created_at=info.created_at,
                )
            ).inserted_primary_key[0]
            rows = [(r, w, hw, lat, part_id, i) for i, (r, w, lat) in enumerate(cols)]
            payloads = self._top_payloads(conn, table, hw)
            rows.sort()  # same key order in every writer: fewer lock waits and no deadlock cycles
            ix.insert_records(conn, rows)
            if payloads:
                conn.execute(sa.insert(ix.top_payloads), payloads)

    def _top_payloads(self, conn: sa.Connection, table: pa.Table, hw_id: int) -> list[dict]:
        """Payload rows for the records of ``table`` (sorted by workload, latency) that enter
        their workload's current ``TOP_CACHE`` fastest on this hardware."""
        wks = table["workload_key"].to_pylist()
        lats = table["latency_s"].to_pylist()
        r = ix.records.c
        q = (
            sa.select(r.latency_s)
            .where(r.workload_key == sa.bindparam("wk"), r.hw_id == hw_id, r.latency_s.is_not(None))
            .order_by(r.latency_s)
            .offset(TOP_CACHE - 1)
            .limit(1)
        )
        picked, start = [], 0
        while start < len(wks):
            end = start
            while end < len(wks) and wks[end] == wks[start]:
                end += 1
            threshold = conn.execute(q, {"wk": ix.wk_to_db(wks[start])}).scalar_one_or_none()
            for i in range(start, min(end, start + TOP_CACHE)):
                if lats[i] is None or (threshold is not None and lats[i] >= threshold):
                    break
                picked.append(i)
            start = end
        if not picked:
            return []
        rows = table.take(picked).to_pylist()
        return [{"record_id": ix.id_to_db(row["record_id"]), "payload": _row_json(row)} for row in rows]

    # ------------------------------------------------------------------ reading
    def _registered_parts(self, hardware_key: str | None = None) -> list[dict]:
        q = sa.select(ix.parts).order_by(ix.parts.c.part_id)
        if hardware_key is not None:
            q = q.where(ix.parts.c.hardware_key == hardware_key)
        with ix.read(self.engine) as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def dataset(self, hardware_key: str | None = None) -> ds.Dataset:
        """A ``pyarrow.dataset`` over the registered parts (optionally of one hardware key)."""
        paths = [self._loc.path(p["path"]) for p in self._registered_parts(hardware_key)]
        return ds.dataset(paths, schema=RECORD_SCHEMA, format="parquet", filesystem=self._loc.fs)

    def _scan_args(self, filters: "Mapping[str, Any] | pc.Expression | None") -> tuple[ds.Dataset, pc.Expression | None]:
        if filters is None:
            return self.dataset(), None
        if isinstance(filters, pc.Expression):
            return self.dataset(), filters
        if not isinstance(filters, Mapping):
            raise TypeError(f"filters must be a dict or a pyarrow.compute.Expression, got {type(filters).__name__}")
        expr = None
        for name, value in filters.items():
            if name not in RECORD_SCHEMA.names:
                raise SchemaMismatch(f"filter on unknown column {name!r}; known: {RECORD_SCHEMA.names}")
            if isinstance(value, (list, tuple, set, frozenset)):
                term = pc.field(name).isin(list(value))
            elif value is None:
                term = pc.field(name).is_null()
            else:
                term = pc.field(name) == value
            expr = term if expr is None else expr & term
        hw = filters.get("hardware_key")
        return self.dataset(hw if isinstance(hw, str) else None), expr

    def scan(self, filters: "Mapping[str, Any] | pc.Expression | None" = None, *, columns: list[str] | None = None) -> pa.Table:
        """Every stored record matching ``filters`` ({column: value or list} or an Expression)."""
        dset, expr = self._scan_args(filters)
        return dset.to_table(filter=expr, columns=columns)

    def scan_batches(
        self, filters: "Mapping[str, Any] | pc.Expression | None" = None, *, columns: list[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Like :meth:`scan`, as a stream of record batches (bounded memory)."""
        dset, expr = self._scan_args(filters)
        yield from dset.to_batches(filter=expr, columns=columns)

    def _open_part(self, path: str) -> tuple[pq.ParquetFile, list[int]]:
        with self._lock:
            hit = self._files.get(path)
            if hit is not None:
                self._files.move_to_end(path)
                return hit
        pf = pq.ParquetFile(self._loc.path(path), filesystem=self._loc.fs)
        starts, total = [], 0
        for i in range(pf.metadata.num_row_groups):
            starts.append(total)
            total += pf.metadata.row_group(i).num_rows
        with self._lock:
            self._files[path] = (pf, starts)
            while len(self._files) > OPEN_FILES:
                self._files.popitem(last=False)
        return pf, starts

    def top_k(self, workload_key: str, hardware_key: str, k: int = 1) -> pa.Table:
        """The ``k`` fastest successful records of a workload on a hardware key, fastest first."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        check_workload_key(workload_key)
        hw = self._hw_id(hardware_key, create=False)
        if hw is None:
            return RECORD_SCHEMA.empty_table()
        r = ix.records.c
        q = (
            sa.select(r.record_id, ix.parts.c.path, r.row_idx)
            .join_from(ix.records, ix.parts, r.part_id == ix.parts.c.part_id)
            .where(r.workload_key == ix.wk_to_db(workload_key), r.hw_id == hw, r.latency_s.is_not(None))
            .order_by(r.latency_s, r.record_id)
            .limit(k)
        )
        with self.engine.connect() as conn:
            hits = conn.execute(q).all()
            if not hits:
                return RECORD_SCHEMA.empty_table()
            cached = {
                bytes(rid): payload
                for rid, payload in conn.execute(
                    sa.select(ix.top_payloads.c.record_id, ix.top_payloads.c.payload).where(
                        ix.top_payloads.c.record_id.in_([bytes(h[0]) for h in hits])
                    )
                )
            }
        pieces = []
        if cached:
            pieces.append(pa.Table.from_pylist([_row_from_json(p) for p in cached.values()], schema=RECORD_SCHEMA))
        by_part: dict[str, list[int]] = {}
        for rid, path, row_idx in hits:
            if bytes(rid) not in cached:
                by_part.setdefault(path, []).append(row_idx)
        for path, idxs in by_part.items():
            pf, starts = self._open_part(path)
            groups = sorted({_group_of(starts, i) for i in idxs})
            tab = pf.read_row_groups(groups)
            offsets, base = {}, 0
            for g in groups:
                offsets[g] = base
                base += pf.metadata.row_group(g).num_rows
            local = [offsets[_group_of(starts, i)] + i - starts[_group_of(starts, i)] for i in idxs]
            pieces.append(tab.take(local).replace_schema_metadata(None).cast(RECORD_SCHEMA))
        out = pa.concat_tables(pieces)
        return out.sort_by([("latency_s", "ascending"), ("record_id", "ascending")])

    # ------------------------------------------------------------------ summaries
    def stats(self) -> dict:
        """Counts for people and dashboards: records, successes, errors, parts, bytes, per hardware."""
        r, p = ix.records.c, ix.parts.c
        with ix.read(self.engine) as conn:
            per_hw = conn.execute(
                sa.select(
                    r.hw_id,
                    sa.func.count(),
                    sa.func.count(r.latency_s),
                    sa.func.count(sa.distinct(r.workload_key)),
                ).group_by(r.hw_id)
            ).all()
            hw_keys = {i: k for i, k in conn.execute(sa.select(ix.hardware_ids.c.hw_id, ix.hardware_ids.c.key))}
            part_hw = {
                hk: (n, b or 0)
                for hk, n, b in conn.execute(sa.select(p.hardware_key, sa.func.count(), sa.func.sum(p.bytes)).group_by(p.hardware_key))
            }
            n_workloads = conn.execute(sa.select(sa.func.count()).select_from(ix.workloads)).scalar_one()
            n_hardware = conn.execute(sa.select(sa.func.count()).select_from(ix.hardware)).scalar_one()
            n_runs = conn.execute(sa.select(sa.func.count()).select_from(ix.runs)).scalar_one()
            n_models = conn.execute(sa.select(sa.func.count()).select_from(ix.models)).scalar_one()
        by_hw = {}
        for hid, n, ok, nw in per_hw:
            hk = hw_keys[hid]
            parts_n, parts_b = part_hw.get(hk, (0, 0))
            by_hw[hk] = {"records": n, "ok": ok, "errors": n - ok, "workloads": nw, "parts": parts_n, "bytes": int(parts_b)}
        return {
            "root": self._loc.display,
            "index_url": self.index_url,
            "records": sum(v["records"] for v in by_hw.values()),
            "ok": sum(v["ok"] for v in by_hw.values()),
            "errors": sum(v["errors"] for v in by_hw.values()),
            "parts": sum(n for n, _ in part_hw.values()),
            "bytes": int(sum(b for _, b in part_hw.values())),
            "workloads_registered": n_workloads,
            "hardware_registered": n_hardware,
            "runs": n_runs,
            "models": n_models,
            "by_hardware": by_hw,
        }

    # ------------------------------------------------------------------ task status and runs
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
        self._upsert(ix.task_status, key, {"status": status, "run_id": run_id, "records": records, "updated_at": _now()})

    def task_statuses(self, *, run_id: str | None = None, hardware_key: str | None = None) -> list[dict]:
        """Every collection-unit status row (optionally of one run or hardware key), oldest update first."""
        t = ix.task_status
        q = sa.select(t).order_by(t.c.updated_at)
        if run_id is not None:
            q = q.where(t.c.run_id == run_id)
        if hardware_key is not None:
            q = q.where(t.c.hardware_key == hardware_key)
        with ix.read(self.engine) as conn:
            return [_utc(r) for r in conn.execute(q).mappings()]

    def start_run(self, kind: str, params: Mapping[str, Any] | None = None) -> str:
        """Open a run (collection, training, ...) and return its id."""
        run_id = uuid.uuid4().hex
        with ix.write(self.engine) as conn:
            conn.execute(
                sa.insert(ix.runs).values(
                    run_id=run_id, kind=kind, status="running", started_at=_now(),
                    params_json=json.dumps(dict(params or {}), sort_keys=True, default=str),
                )
            )
        return run_id

    def finish_run(self, run_id: str, status: str = "done") -> None:
        """Close a run with a final status ("done", "failed", "interrupted", ...)."""
        with ix.write(self.engine) as conn:
            n = conn.execute(
                sa.update(ix.runs).where(ix.runs.c.run_id == run_id).values(status=status, finished_at=_now())
            ).rowcount
        if n != 1:
            raise CorpusError(f"unknown run id {run_id!r}")

    def runs(self) -> list[dict]:
        """Every run, oldest first, with its params decoded."""
        with ix.read(self.engine) as conn:
            rows = [_utc(r) for r in conn.execute(sa.select(ix.runs).order_by(ix.runs.c.started_at)).mappings()]
        for r in rows:
            r["params"] = json.loads(r.pop("params_json") or "{}")
        return rows

    def register_model(
        self, model_id: str, *, path: str, hardware_key: str | None = None, base_model_id: str | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a trained model checkpoint (a ``save_pretrained`` directory)."""
        if hardware_key is not None:
            check_hardware_key(hardware_key)
        self._upsert(
            ix.models, {"model_id": model_id},
            {"path": str(path), "hardware_key": hardware_key, "base_model_id": base_model_id,
             "metrics_json": json.dumps(dict(metrics or {}), sort_keys=True), "created_at": _now()},
        )

    def models(self, hardware_key: str | None = None) -> list[dict]:
        """Registered models, newest first (optionally of one hardware key)."""
        q = sa.select(ix.models).order_by(ix.models.c.created_at.desc())
        if hardware_key is not None:
            q = q.where(ix.models.c.hardware_key == hardware_key)
        with ix.read(self.engine) as conn:
            rows = [_utc(r) for r in conn.execute(q).mappings()]
        for r in rows:
            r["metrics"] = json.loads(r.pop("metrics_json") or "{}")
        return rows

    # ------------------------------------------------------------------ integrity
    def _quarantine(self, relpath: str) -> str:
        dest = f"{QUARANTINE_DIR}/{relpath.replace('/', '__')}"
        self._loc.make_dir(QUARANTINE_DIR)
        self._loc.move(relpath, dest)
        return dest

    def _disk_parts(self) -> list[str]:
        return self._loc.glob(PART_GLOB)

    def verify(self) -> VerifyReport:
        """Rehash every registered part; quarantine bad ones (index rows removed); report all problems."""
        from tqdm import tqdm

        report = VerifyReport()
        registered = self._registered_parts()
        for part in tqdm(registered, desc="verify", unit="part", disable=len(registered) < 50):
            rel = part["path"]
            report.parts_checked += 1
            reason = None
            present = self._loc.exists(rel)
            if not present:
                report.missing.append(rel)
            else:
                digest = self._loc.sha256(rel)
                if digest != part["sha256"]:
                    reason = f"sha256 {digest[:12]}... != registered {part['sha256'][:12]}... (corrupt or truncated)"
                else:
                    try:
                        n = pq.ParquetFile(self._loc.path(rel), filesystem=self._loc.fs).metadata.num_rows
                    except Exception as exc:  # noqa: BLE001 - any unreadable file is reported
                        n, reason = None, f"unreadable: {exc}"
                    if n is not None and n != part["rows"]:
                        reason = f"{n} rows on disk, {part['rows']} registered"
            if reason is not None or not present:
                with ix.write(self.engine) as conn:
                    gone = sa.select(ix.records.c.record_id).where(ix.records.c.part_id == part["part_id"])
                    conn.execute(sa.delete(ix.top_payloads).where(ix.top_payloads.c.record_id.in_(gone)))
                    conn.execute(sa.delete(ix.records).where(ix.records.c.part_id == part["part_id"]))
                    conn.execute(sa.delete(ix.parts).where(ix.parts.c.part_id == part["part_id"]))
                with self._lock:
                    self._files.pop(part["path"], None)
                if reason is not None:
                    moved = self._quarantine(part["path"])
                    report.quarantined.append((part["path"], f"{reason}; moved to {moved}"))
                    log.error("quarantined part %s: %s", part["path"], reason)
            else:
                report.records_checked += part["rows"]
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
        with ix.write(self.engine) as conn:
            conn.execute(sa.delete(ix.records))
            conn.execute(sa.delete(ix.parts))
            conn.execute(sa.delete(ix.top_payloads))  # a cache: rebuilt by later appends, top_k falls back meanwhile
            if parts_rows:
                conn.execute(sa.insert(ix.parts), parts_rows)
            for i in range(0, len(rec_rows), 50_000):
                ix.insert_records(conn, rec_rows[i : i + 50_000])
            if conn.dialect.name == "postgresql" and parts_rows:
                conn.exec_driver_sql(
                    "SELECT setval(pg_get_serial_sequence('parts', 'part_id'), (SELECT MAX(part_id) FROM parts))"
                )
        with self._lock:
            self._files.clear()
        report.parts, report.records = len(parts_rows), len(rec_rows)
        return report


def _row_json(row: dict) -> bytes:
    """A record row as zlib-compressed JSON (datetimes as ISO 8601) for ``top_payloads``."""
    text = json.dumps({k: (v.isoformat() if isinstance(v, _dt.datetime) else v) for k, v in row.items()})
    return zlib.compress(text.encode(), 6)


def _row_from_json(blob: bytes) -> dict:
    row = json.loads(zlib.decompress(blob))
    row["created_at"] = _dt.datetime.fromisoformat(row["created_at"])
    return row


def _group_of(starts: list[int], row: int) -> int:
    """Index of the row group holding ``row`` (``starts`` are the groups' first rows)."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= row:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first_of_each_id(table: pa.Table) -> pa.Table:
    """Keep the first row of each record id (a batch may repeat a measurement)."""
    ids = table["record_id"]
    if pc.count_distinct(ids).as_py() == table.num_rows:
        return table
    first = table.append_column("_i", pa.array(range(table.num_rows), pa.int64())).group_by("record_id").aggregate([("_i", "min")])
    keep = pc.is_in(pa.array(range(table.num_rows), pa.int64()), first["_i_min"])
    return table.filter(keep)
