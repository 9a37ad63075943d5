"""Synthetic records and index checks shared by the storage tests and their worker processes.

Synthetic means test data, not measurements: these rows exercise storage only. The module has a
unique name because worker subprocesses import it by putting this directory on ``sys.path``.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import sqlalchemy as sa

HW = "cpu-znver4-2c"


def make_records(n: int, *, workloads: int = 3, hardware: str = HW, seed: int = 0, start: int = 0,
                 error_every: int = 0) -> list[dict]:
    """``n`` synthetic records (test data, not measurements): ids ``start..start+n-1`` are distinct."""
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        trace = json.dumps([[["SamplePerfectTile", [], [4, 64], ["v"]]], [[0, [i, 1, 1, 1]]]])
        rec = {
            "workload_key": f"{i % workloads:016x}",
            "hardware_key": hardware,
            "trace_json": trace,
            "decisions_json": json.dumps([[0, [i, 1, 1, 1]]]),
            "task_name": f"task{i % workloads}",
            "tuner": "test",
        }
        if error_every and i % error_every == 0:
            rec["error"] = "build error: synthetic"
        else:
            secs = [rng.uniform(1e-4, 1e-2) for _ in range(3)]
            rec["run_secs"] = secs
            rec["latency_s"] = sorted(secs)[1]
        out.append(rec)
    return out


def local_dir(root) -> Path:
    """The local directory of a corpus (or of a root given as a path or a ``file://`` URI),
    so tests can damage its files directly."""
    if not isinstance(root, (str, Path)):  # a Corpus
        root = root.root
    if isinstance(root, Path):
        return root
    fs, path = pafs.FileSystem.from_uri(root)
    assert isinstance(fs, pafs.LocalFileSystem), root
    return Path(path)


def check_consistent(corpus) -> int:
    """Assert the index and the registered parts agree row for row; return the record count."""
    from storage import index as ix

    with corpus.engine.connect() as conn:
        parts = conn.execute(sa.select(ix.parts)).mappings().all()
        recs = conn.execute(sa.select(ix.records.c.record_id, ix.records.c.part_id, ix.records.c.row_idx)).all()
    by_part: dict = {}
    for rid, pid, idx in recs:
        by_part.setdefault(pid, []).append((idx, ix.id_from_db(rid)))
    total = 0
    for p in parts:
        ids = pq.read_table(corpus.fs_path(p["path"]), filesystem=corpus.filesystem,
                            columns=["record_id"])["record_id"].to_pylist()
        assert len(ids) == p["rows"], p["path"]
        assert [r for _, r in sorted(by_part.get(p["part_id"], []))] == ids, p["path"]
        total += len(ids)
    assert total == len(recs), "index has records rows that belong to no registered part"
    table = corpus.scan(columns=["record_id"])
    assert table.num_rows == total == pc.count_distinct(table["record_id"]).as_py()
    return total


def unit_keys(corpus) -> list[tuple[str, str]]:
    """(workload_key, hardware_key) of every collection unit the index has a status for."""
    from storage import index as ix

    with ix.read(corpus.engine) as conn:
        return [(r.workload_key, r.hardware_key) for r in conn.execute(sa.select(ix.task_status))]


def index_snapshot(corpus) -> tuple[list, list]:
    """The parts and records rows of the index, with part ids replaced by paths (for comparison)."""
    from storage import index as ix

    with corpus.engine.connect() as conn:
        parts = conn.execute(sa.select(ix.parts)).mappings().all()
        path_of = {p["part_id"]: p["path"] for p in parts}
        recs = conn.execute(sa.select(ix.records)).mappings().all()
        hw_of = dict(conn.execute(sa.select(ix.hardware_ids.c.hw_id, ix.hardware_ids.c.key)).all())
    p_rows = sorted((p["path"], p["hardware_key"], p["rows"], p["sha256"], p["bytes"],
                     p["created_at"].replace(tzinfo=None)) for p in parts)
    r_rows = sorted((ix.id_from_db(r["record_id"]), ix.wk_from_db(r["workload_key"]), hw_of[r["hw_id"]], r["latency_s"],
                     path_of[r["part_id"]], r["row_idx"]) for r in recs)
    return p_rows, r_rows
