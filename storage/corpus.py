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

One module per concept, one entry point: ``Corpus`` holds opening, ``append``, reading
(``scan``, ``top_k``, ``dataset``), ``stats`` and the workload and hardware registrations here,
and inherits the methods of the other concepts from their modules' mixins: integrity (``verify``,
``reindex``, quarantine) from ``storage.integrity``, runs and task status from ``storage.runs``,
the model registry from ``storage.registry``.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import sqlalchemy as sa

from storage import index as ix
from storage.errors import CorpusError, SchemaMismatch
from storage.integrity import IntegrityMixin
from storage.lookups import LookupsMixin
from storage.location import Location
from storage.parts import PartInfo, PartRows, sort_for_part, write_part
from storage.registry import RegistryMixin
from storage.runs import RunsMixin
from storage.schema import (
    RECORD_SCHEMA,
    Record,
    check_hardware_key,
    check_workload_key,
    first_of_each_id,
    to_record_table,
)

log = logging.getLogger(__name__)

ID_CHUNK = 5000  # ids per "IN (...)" query: under every backend's bound-parameter limit
TOP_CACHE = 16  # fastest records per (workload, hardware) whose full row is cached in the index for top_k


@dataclass(frozen=True)
class AppendResult:
    """What one ``append`` stored: the new part (None if every record was already stored)."""

    part_path: str | None  # relative to the corpus root; the first one when several hardware keys
    rows: int  # records newly stored
    duplicates: int  # records dropped because their id was already stored (or repeated in the batch)
    part_paths: tuple[str, ...] = ()  # every part written (one per hardware key in the batch)


class Corpus(IntegrityMixin, RunsMixin, RegistryMixin, LookupsMixin):
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
        self._parts = PartRows(location)  # open part files, for top_k
        self._hw_ids: dict[str, int] = {}

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
        self._parts.forget()
        self.engine.dispose()

    def __enter__(self) -> "Corpus":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Corpus(root={self._loc.display!r}, index_url={self.index_url!r})"

    # ------------------------------------------------------------------ registration
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
        if self.workload(workload_key) is None:
            values["created_at"] = ix.now()
        ix.upsert(self.engine, ix.workloads, {"workload_key": workload_key}, values)

    def register_workload_model(self, workload_key: str, *, model: str, weight: float = 1.0) -> None:
        """Record that ``workload_key`` occurs ``weight`` times in ``model``."""
        check_workload_key(workload_key)
        ix.upsert(self.engine, ix.workload_models, {"workload_key": workload_key, "model": model}, {"weight": float(weight)})

    def register_hardware(self, key: str, *, target: Mapping[str, Any] | None = None, description: str = "") -> None:
        """Record a hardware key with its TVM target (dict form) and a human description."""
        check_hardware_key(key)
        values: dict[str, Any] = {"description": description}
        if target is not None:
            values["target_json"] = json.dumps(dict(target), sort_keys=True)
        if self.hardware_info(key) is None:
            values["created_at"] = ix.now()
        ix.upsert(self.engine, ix.hardware, {"key": key}, values)

    def workload(self, workload_key: str) -> dict | None:
        """The stored row of a workload, or None."""
        with ix.read(self.engine) as conn:
            row = conn.execute(sa.select(ix.workloads).where(ix.workloads.c.workload_key == workload_key)).mappings().first()
        return ix.utc_row(row) if row else None

    def workloads(self) -> list[dict]:
        """Every registered workload (with the models it occurs in and their weights)."""
        with ix.read(self.engine) as conn:
            rows = [ix.utc_row(r) for r in conn.execute(sa.select(ix.workloads).order_by(ix.workloads.c.workload_key)).mappings()]
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
        out = ix.utc_row(row)
        out["target"] = json.loads(out["target_json"]) if out["target_json"] else None
        return out

    def _hw_id(self, key: str, *, create: bool) -> int | None:
        """The small integer standing for a hardware key in ``records`` (created on first use)."""
        hid = self._hw_ids.get(key)
        if hid is not None:
            return hid
        t = ix.hardware_ids
        for _ in range(ix.MAX_REGISTER_ATTEMPTS):
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
    def append(self, records: "list[dict | Record] | pa.Table") -> AppendResult:
        """Store records; ids already stored are skipped (idempotent). See the module docstring.

        An empty batch (a tuning round that measured nothing) is no error: it stores nothing.
        """
        if isinstance(records, list) and not records:
            return AppendResult(None, 0, 0)
        table = to_record_table(records)
        n_in = table.num_rows
        if n_in == 0:
            return AppendResult(None, 0, 0)
        table = first_of_each_id(table)
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
        for _ in range(ix.MAX_REGISTER_ATTEMPTS):
            if table.num_rows == 0:
                return None
            info = write_part(self._loc, hw, table, ix.now())
            try:
                self._register(info, table)
                return info.path
            except (sa.exc.IntegrityError, sa.exc.OperationalError) as exc:
                # Another writer stored some of these ids meanwhile (or a deadlock was broken):
                # the part was not registered; rebuild it from the rows still new and retry.
                log.debug("registration of %s refused (%s); retrying without stored ids", info.path, type(exc).__name__)
                self._loc.delete(info.path)
                table = self._drop_existing(table)
        raise CorpusError(f"could not register a part for {hw} after {ix.MAX_REGISTER_ATTEMPTS} attempts (heavy contention?)")

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
        return [{"record_id": ix.id_to_db(row["record_id"]), "payload": ix.payload_to_db(row)} for row in rows]

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

