"""The fastest records by key: a workload's top k on a hardware key, a whole model's best records
in one grouped query, the best latency of every workload, all answered from the index (and the
cache of top records' payloads) with a Parquet read only for what the cache lacks.

The methods live in :class:`LookupsMixin`, which :class:`storage.corpus.Corpus` inherits (it
provides ``engine``, ``_hw_id`` and ``_parts``), so ``corpus.top_k(...)`` etc. stay the one
entry point.
"""
from __future__ import annotations

from typing import Iterable

import pyarrow as pa
import sqlalchemy as sa

from storage import index as ix
from storage.schema import RECORD_SCHEMA, check_workload_key


class LookupsMixin:
    """Read the fastest records (see the module docstring)."""

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
        out = self._records_at(hits)
        return out.sort_by([("latency_s", "ascending"), ("record_id", "ascending")])

    def best_records(self, workload_keys: Iterable[str], hardware_key: str) -> dict[str, dict]:
        """workload_key -> its fastest successful record on ``hardware_key`` (a row dict), for
        every one of ``workload_keys`` the corpus measured there: a whole model's lookup in one
        grouped index query (and the rows from the cache of top records, else their parts)."""
        keys = [check_workload_key(k) for k in dict.fromkeys(workload_keys)]
        hw = self._hw_id(hardware_key, create=False)
        if hw is None or not keys:
            return {}
        r = ix.records.c
        cond = [r.hw_id == hw, r.latency_s.is_not(None), r.workload_key.in_([ix.wk_to_db(k) for k in keys])]
        best = sa.select(r.workload_key, sa.func.min(r.latency_s).label("m")).where(*cond).group_by(r.workload_key).subquery()
        q = (sa.select(r.record_id, ix.parts.c.path, r.row_idx, r.workload_key)
             .join_from(ix.records, best, sa.and_(r.workload_key == best.c.workload_key, r.latency_s == best.c.m))
             .join(ix.parts, r.part_id == ix.parts.c.part_id)
             .where(r.hw_id == hw)
             .order_by(r.workload_key, r.record_id))
        with self.engine.connect() as conn:
            hits, seen = [], set()
            for rid, path, row_idx, wk in conn.execute(q):
                if wk not in seen:  # equal latencies: the smallest id, as top_k orders them
                    seen.add(wk)
                    hits.append((rid, path, row_idx))
        return {row["workload_key"]: row for row in self._records_at(hits).to_pylist()}

    def _records_at(self, hits: list) -> pa.Table:
        """The records of index hits ``(record_id, part path, row index)``: from the cache of top
        records where it has them, else read from their parts."""
        if not hits:
            return RECORD_SCHEMA.empty_table()
        with self.engine.connect() as conn:
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
            pieces.append(pa.Table.from_pylist([ix.payload_from_db(p) for p in cached.values()], schema=RECORD_SCHEMA))
        by_part: dict[str, list[int]] = {}
        for rid, path, row_idx in hits:
            if bytes(rid) not in cached:
                by_part.setdefault(path, []).append(row_idx)
        for path, idxs in by_part.items():
            pieces.append(self._parts.take(path, idxs))
        return pa.concat_tables(pieces)

    def best_latencies(self, hardware_key: str) -> dict[str, float]:
        """workload_key -> fastest successful latency on ``hardware_key`` (from the index alone)."""
        hw, r = self._hw_id(hardware_key, create=False), ix.records.c
        q = sa.select(r.workload_key, sa.func.min(r.latency_s)).where(r.hw_id == hw, r.latency_s.is_not(None))
        with ix.read(self.engine) as conn:
            return {ix.wk_from_db(w): t for w, t in conn.execute(q.group_by(r.workload_key))} if hw is not None else {}
