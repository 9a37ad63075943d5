"""Parquet part files: durable, immutable, readable by any Parquet reader.

Layout: ``<root>/hardware=<key>/part-<32 hex>.parquet`` (Hive-style, so plain
``pyarrow.dataset.dataset(root, partitioning="hive")`` and DuckDB's
``read_parquet('<root>/*/*.parquet', hive_partitioning=true)`` read the corpus without our code).

Durability: a part is written under a hidden temporary name (``.part-<hex>.parquet.tmp``,
ignored by pyarrow.dataset and by ``*.parquet`` globs), fsynced, renamed to its final name and the
directory fsynced. Only then is it registered in the index. Under a URI root (``s3://``,
``file://``, ...: ``storage.location``) the part is streamed to the same hidden name and moved to
its final key instead (no fsync; the store's own durability). A path is never rewritten with
other content: when a part must change (duplicates found at registration), a new part with a
new name is written and the old one removed, so readers that cached a file never see it change.

Within a part, rows are sorted by ``(workload_key, latency_s)`` in row groups of
``ROW_GROUP_ROWS``, so when ``top_k`` must read records from Parquet (k beyond the index's
payload cache) it reads one row group per part, not whole files.
The creation time and storage format version are kept in the Parquet key-value metadata, which
lets ``reindex`` rebuild the ``parts`` rows exactly.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage.location import Location
from storage.schema import RECORD_SCHEMA, conform

ROW_GROUP_ROWS = 8192  # rows per Parquet row group: scans pay per group; top_k rarely reads one (payload cache)
COMPRESSION = "zstd"  # zstd level default (3): ~5-10x on trace JSON at >300 MB/s
PART_GLOB = "hardware=*/part-*.parquet"  # final part files, relative to the corpus root
TEMP_GLOB = "hardware=*/.part-*.tmp"  # temporary files of writers (killed writers leave them behind)
META_CREATED_AT = b"tlm.created_at"
META_FORMAT = b"tlm.part_format"
PART_FORMAT = b"1"
OPEN_FILES = 64  # Parquet footers kept open by a PartRows (top_k reads a few rows of many parts)


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


def sort_for_part(table: pa.Table) -> pa.Table:
    """Order rows so that one workload's fastest records sit together (see module docstring)."""
    return table.sort_by([("workload_key", "ascending"), ("latency_s", "ascending"), ("record_id", "ascending")])


def _write_parquet(table: pa.Table, where: Any) -> None:
    """The one Parquet encoding of a part, whatever it is written to."""
    pq.write_table(table, where, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS, write_statistics=True)


def _write_local(loc: Location, directory: str, name: str, table: pa.Table) -> tuple[str, int]:
    """Temp name, fsync, rename, fsync the directory; return (sha256, bytes)."""
    root = loc.root
    dirpath = root / directory
    if not dirpath.is_dir():
        dirpath.mkdir(parents=True, exist_ok=True)
        fsync_dir(root)
    tmp = dirpath / f".{name}.tmp"
    final = dirpath / name
    try:
        _write_parquet(table, tmp)
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
    fsync_dir(dirpath)
    return h.hexdigest(), size


class _HashingSink:
    """A write-only file that hashes and counts the bytes it forwards to ``out``, so the sha256
    of a part written to an object store comes from the bytes sent, without reading them back."""

    def __init__(self, out: pa.NativeFile) -> None:
        self.out = out
        self.hash = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: Any) -> int:
        self.hash.update(data)
        self.size += len(memoryview(data))
        return self.out.write(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:  # the stream is closed by its owner (a ``with`` block)
        self.closed = True


def _write_fs(loc: Location, directory: str, name: str, table: pa.Table) -> tuple[str, int]:
    """Stream to a temporary key, then move it to the final key; return (sha256, bytes).

    See ``storage.location`` for what this guarantees on an object store."""
    tmp, final = f"{directory}/.{name}.tmp", f"{directory}/{name}"
    loc.make_dir(directory)
    try:
        with loc.fs.open_output_stream(loc.path(tmp)) as out:
            sink = _HashingSink(out)
            _write_parquet(table, sink)
        loc.fs.move(loc.path(tmp), loc.path(final))
    except BaseException:
        with contextlib.suppress(Exception):  # best effort: reindex removes what is left
            loc.delete(tmp)
        raise
    return sink.hash.hexdigest(), sink.size


def write_part(loc: Location, hardware_key: str, table: pa.Table, created_at: _dt.datetime) -> PartInfo:
    """Write ``table`` (already sorted, schema ``RECORD_SCHEMA``) as a complete part; return its info.

    Under a plain path the part is durable on disk when this returns (fsync); under a URI it is
    as durable as the filesystem makes a completed write (``storage.location``)."""
    directory = f"hardware={hardware_key}"
    name = f"part-{uuid.uuid4().hex}.parquet"
    meta = {META_CREATED_AT: created_at.astimezone(_dt.timezone.utc).isoformat().encode(), META_FORMAT: PART_FORMAT}
    table = table.replace_schema_metadata(meta)
    write = _write_local if loc.local else _write_fs
    digest, size = write(loc, directory, name, table)
    return PartInfo(
        path=f"{directory}/{name}",
        hardware_key=hardware_key,
        rows=table.num_rows,
        sha256=digest,
        bytes=size,
        created_at=created_at,
    )


def read_part(loc: Location, relpath: str) -> pa.Table:
    """Read a whole part with ``RECORD_SCHEMA`` (raises on a corrupt or truncated file)."""
    table = pq.read_table(loc.path(relpath), schema=RECORD_SCHEMA, filesystem=loc.fs)
    return table.replace_schema_metadata(None)


def part_created_at(loc: Location, relpath: str) -> _dt.datetime:
    """Creation time stored in a part's metadata (file mtime if absent)."""
    meta = pq.read_schema(loc.path(relpath), filesystem=loc.fs).metadata or {}
    raw = meta.get(META_CREATED_AT)
    if raw:
        return _dt.datetime.fromisoformat(raw.decode())
    mtime = loc.mtime(relpath)
    return mtime if mtime.tzinfo else mtime.replace(tzinfo=_dt.timezone.utc)


def hardware_of(relpath: str) -> str:
    """The hardware key encoded in a part's directory name."""
    first = relpath.split("/", 1)[0]
    if not first.startswith("hardware="):
        raise ValueError(f"part path {relpath!r} is not under a hardware=<key> directory")
    return first[len("hardware="):]


class PartRows:
    """Reads chosen rows of parts by index, keeping the last ``OPEN_FILES`` footers open.

    ``top_k`` needs a handful of rows from each of many parts; parsing a footer each time would
    cost more than the read. A part path never changes content (module docstring), so a cached
    footer stays valid until the part is removed; then :meth:`forget` it. Thread-safe.
    """

    def __init__(self, loc: Location) -> None:
        self._loc = loc
        self._files: OrderedDict[str, tuple[pq.ParquetFile, list[int]]] = OrderedDict()
        self._lock = threading.Lock()

    def _open(self, relpath: str) -> tuple[pq.ParquetFile, list[int]]:
        """The open file and the first row of each of its row groups."""
        with self._lock:
            hit = self._files.get(relpath)
            if hit is not None:
                self._files.move_to_end(relpath)
                return hit
        pf = pq.ParquetFile(self._loc.path(relpath), filesystem=self._loc.fs)
        starts, total = [], 0
        for i in range(pf.metadata.num_row_groups):
            starts.append(total)
            total += pf.metadata.row_group(i).num_rows
        with self._lock:
            self._files[relpath] = (pf, starts)
            while len(self._files) > OPEN_FILES:
                self._files.popitem(last=False)
        return pf, starts

    def take(self, relpath: str, rows: list[int]) -> pa.Table:
        """Rows ``rows`` (indices into the part) of a part, in that order, reading only their row groups."""
        pf, starts = self._open(relpath)
        groups = sorted({_group_of(starts, i) for i in rows})
        tab = pf.read_row_groups(groups)
        offsets, base = {}, 0
        for g in groups:
            offsets[g] = base
            base += pf.metadata.row_group(g).num_rows
        local = [offsets[_group_of(starts, i)] + i - starts[_group_of(starts, i)] for i in rows]
        return conform(tab.take(local))

    def forget(self, relpath: str | None = None) -> None:
        """Close one part (it was removed or quarantined), or every part when ``relpath`` is None."""
        with self._lock:
            if relpath is None:
                self._files.clear()
            else:
                self._files.pop(relpath, None)


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
