"""Parquet part files: durable, immutable, readable by any Parquet reader.

Layout: ``<root>/hardware=<key>/part-<32 hex>.parquet`` (Hive-style, so plain
``pyarrow.dataset.dataset(root, partitioning="hive")`` and DuckDB's
``read_parquet('<root>/*/*.parquet', hive_partitioning=true)`` read the corpus without our code).

Durability: a part is written under a hidden temporary name (``.part-<hex>.parquet.tmp``,
ignored by pyarrow.dataset and by ``*.parquet`` globs), fsynced, renamed to its final name and the
directory fsynced. Only then is it registered in the index. A path is never rewritten with
other content: when a part must change (duplicates found at registration), a new part with a
new name is written and the old one removed, so readers that cached a file never see it change.

Within a part, rows are sorted by ``(workload_key, latency_s)`` in row groups of
``ROW_GROUP_ROWS``, so when ``top_k`` must read records from Parquet (k beyond the index's
payload cache) it reads one row group per part, not whole files.
The creation time and storage format version are kept in the Parquet key-value metadata, which
lets ``reindex`` rebuild the ``parts`` rows exactly.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from storage.schema import RECORD_SCHEMA

ROW_GROUP_ROWS = 8192  # rows per Parquet row group: scans pay per group; top_k rarely reads one (payload cache)
COMPRESSION = "zstd"  # zstd level default (3): ~5-10x on trace JSON at >300 MB/s
PART_GLOB = "hardware=*/part-*.parquet"  # final part files, relative to the corpus root
TEMP_GLOB = "hardware=*/.part-*.tmp"  # temporary files of writers (killed writers leave them behind)
META_CREATED_AT = b"tlm.created_at"
META_FORMAT = b"tlm.part_format"
PART_FORMAT = b"1"


@dataclass(frozen=True)
class PartInfo:
    """A part file as the index sees it."""

    path: str  # relative to the corpus root, '/'-separated
    hardware_key: str
    rows: int
    sha256: str
    bytes: int
    created_at: _dt.datetime


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (no-op where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def sort_for_part(table: pa.Table) -> pa.Table:
    """Order rows so that one workload's fastest records sit together (see module docstring)."""
    return table.sort_by([("workload_key", "ascending"), ("latency_s", "ascending"), ("record_id", "ascending")])


def write_part(root: Path, hardware_key: str, table: pa.Table, created_at: _dt.datetime) -> PartInfo:
    """Write ``table`` (already sorted, schema ``RECORD_SCHEMA``) as a durable part; return its info."""
    directory = root / f"hardware={hardware_key}"
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(root)
    name = f"part-{uuid.uuid4().hex}.parquet"
    tmp = directory / f".{name}.tmp"
    final = directory / name
    meta = {META_CREATED_AT: created_at.astimezone(_dt.timezone.utc).isoformat().encode(), META_FORMAT: PART_FORMAT}
    table = table.replace_schema_metadata(meta)
    try:
        pq.write_table(
            table,
            tmp,
            compression=COMPRESSION,
            row_group_size=ROW_GROUP_ROWS,
            write_statistics=True,
        )
        h = hashlib.sha256()
        with open(tmp, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
            os.fsync(f.fileno())
        size = tmp.stat().st_size
        os.rename(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return PartInfo(
        path=final.relative_to(root).as_posix(),
        hardware_key=hardware_key,
        rows=table.num_rows,
        sha256=h.hexdigest(),
        bytes=size,
        created_at=created_at,
    )


def read_part(path: Path) -> pa.Table:
    """Read a whole part with ``RECORD_SCHEMA`` (raises on a corrupt or truncated file)."""
    table = pq.read_table(path, schema=RECORD_SCHEMA)
    return table.replace_schema_metadata(None)


def part_created_at(path: Path) -> _dt.datetime:
    """Creation time stored in a part's metadata (file mtime if absent)."""
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(META_CREATED_AT)
    if raw:
        return _dt.datetime.fromisoformat(raw.decode())
    return _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc)


def hardware_of(relpath: str) -> str:
    """The hardware key encoded in a part's directory name."""
    first = relpath.split("/", 1)[0]
    if not first.startswith("hardware="):
        raise ValueError(f"part path {relpath!r} is not under a hardware=<key> directory")
    return first[len("hardware="):]
