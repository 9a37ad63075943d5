"""Where a corpus's files live: a local directory, or any ``pyarrow.fs`` URI.

A **plain path** (``/data/corpus``, ``~/corpus``, a shared NFS mount) is the default and the
strongest choice for a disk: a part is written under a temporary name, fsynced, renamed and its
directory fsynced (``storage.parts``), so a registered part survives a power cut.

A **URI** that ``pyarrow.fs.FileSystem.from_uri`` understands (``file:///...``,
``s3://bucket/prefix``, ``gs://bucket/prefix``, ``hdfs://host/path``) lets many nodes write one
corpus without a shared POSIX mount. A part is streamed to a hidden temporary key under the same
prefix (``hardware=<key>/.part-<hex>.parquet.tmp``), its sha256 taken from the bytes as they are
written (nothing is read back), then ``FileSystem.move``d to its final key and only then
registered. What that guarantees is the store's: on an object store an object exists only once
its PUT (or multipart completion) has returned, and a move is a server-side copy + delete, so the
final key is either absent or holds the whole part, never half of it; durability is the store's
(S3, GCS: durable when the write returns). No fsync is issued on this path. A writer killed
mid-write leaves either the temporary key (``verify`` lists it, ``reindex`` removes it) or an
incomplete multipart upload that only the bucket's lifecycle rule expires. A ``file://`` URI uses
this same path (rename is atomic, nothing fsynced): give a plain path for a local disk.

The index: a local root (plain path or ``file://``) defaults to ``sqlite:///<root>/index.sqlite``;
any other URI needs an explicit ``index_url`` (PostgreSQL, so that many nodes share it): there is
no SQLite inside an object store.

Tested with ``file://`` and pyarrow's in-memory ``mock://`` filesystem (a non-local filesystem
with the same code path as S3). There is no S3, GCS or HDFS server in the test environment (no
network, no MinIO), so those schemes are untested against a real store.
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from storage.errors import CorpusError

URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # "scheme://..." is a URI; anything else a path
HASH_CHUNK = 1 << 20  # bytes per read when rehashing a part


def is_uri(root: str | os.PathLike) -> bool:
    """True for ``scheme://...`` strings (a ``pathlib.Path`` is always a local path)."""
    return isinstance(root, str) and bool(URI_RE.match(root))


def safe_uri(uri: str) -> str:
    """``uri`` with any password in it replaced by ``***`` (for logs, repr and stats)."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class Location:
    """A corpus root: the filesystem holding it and its path there.

    Every read (listing, hashing, Parquet) goes through ``fs``; only writing a part
    (``storage.parts.write_part``) and moving one (:meth:`move`) differ for a local path.
    """

    root: Path | str  # what callers see: a resolved Path, or the URI as given (trailing "/" removed)
    fs: pafs.FileSystem  # LocalFileSystem for a plain path
    base: str  # the root as a path inside ``fs`` ("bucket/prefix" on S3), no trailing "/"
    local: bool  # a plain path: parts are fsynced and renamed with os calls

    @classmethod
    def open(cls, root: str | os.PathLike, index_url: str | None) -> tuple["Location", str]:
        """Resolve ``root``, create it if needed, and return it with the index URL to use.

        A non-local URI without ``index_url`` is refused before its filesystem is contacted.
        """
        if is_uri(root):
            uri = root.rstrip("/")
            scheme = urlsplit(uri).scheme.lower()
            if index_url is None and scheme != "file":
                raise CorpusError(
                    f"corpus root {safe_uri(uri)!r} is not on a local filesystem: give index_url "
                    "(e.g. postgresql://user@host/tlm); a SQLite index cannot live in an object store"
                )
            try:
                fs, base = pafs.FileSystem.from_uri(uri)
            except Exception as exc:  # noqa: BLE001 - ArrowInvalid, OSError, ...: all mean a bad root
                raise CorpusError(f"cannot open corpus root {safe_uri(uri)!r}: {exc}") from exc
            loc = cls(uri, fs, base.rstrip("/") if base != "/" else base, local=False)
            try:
                if loc.base:
                    fs.create_dir(loc.base, recursive=True)
            except Exception as exc:  # noqa: BLE001
                raise CorpusError(f"cannot create corpus root {safe_uri(uri)!r}: {exc}") from exc
            default_url = f"sqlite:///{loc.path('index.sqlite')}"  # reached only for file:// roots
        else:
            path = Path(root).expanduser().resolve()
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CorpusError(f"cannot create corpus directory {str(path)!r}: {exc}") from exc
            loc = cls(path, pafs.LocalFileSystem(), str(path), local=True)
            default_url = f"sqlite:///{path / 'index.sqlite'}"
        return loc, index_url or default_url

    @property
    def display(self) -> str:
        """The root for people: the path, or the URI without its password."""
        return safe_uri(self.root) if isinstance(self.root, str) else str(self.root)

    def path(self, rel: str = "") -> str:
        """The path inside ``fs`` of ``rel`` ('/'-separated, relative to the root).

        A ``rel`` that would leave the root (absolute, a ``..`` segment, a backslash or NUL) is a
        ``CorpusError``: paths come from an index, which may be foreign (``tlm corpus merge``) or
        tampered with, and the corpus reads, moves and deletes what they name."""
        if not rel:
            return self.base
        if rel.startswith("/") or "\\" in rel or "\0" in rel or ".." in rel.split("/"):
            raise CorpusError(f"part path {rel!r} leaves the corpus root; refused")
        return f"{self.base.rstrip('/')}/{rel}" if self.base else rel

    def _info(self, rel: str) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path(rel))

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` is present (a file or a directory)."""
        return self._info(rel).type != pafs.FileType.NotFound

    def size(self, rel: str) -> int:
        """Size in bytes of the file ``rel``."""
        return int(self._info(rel).size)

    def mtime(self, rel: str):
        """Modification time of ``rel`` (a datetime; timezone as the filesystem reports it)."""
        return self._info(rel).mtime

    def sha256(self, rel: str) -> str:
        """Hex sha256 of the bytes of ``rel``."""
        h = hashlib.sha256()
        with self.fs.open_input_stream(self.path(rel)) as f:
            while chunk := f.read(HASH_CHUNK):
                h.update(chunk)
        return h.hexdigest()

    def glob(self, pattern: str) -> list[str]:
        """Relative paths matching a '/'-separated ``fnmatch`` pattern (one level per component), sorted.

        Walks one listing per matched directory, so on an object store ``hardware=*/part-*``
        costs one LIST of the root plus one per hardware key.
        """
        found = [""]
        comps = pattern.split("/")
        for depth, comp in enumerate(comps):
            last = depth == len(comps) - 1
            nxt = []
            for rel in found:
                infos = self.fs.get_file_info(pafs.FileSelector(self.path(rel), allow_not_found=True))
                for info in infos:
                    if fnmatch.fnmatchcase(info.base_name, comp) and (
                        info.type == (pafs.FileType.File if last else pafs.FileType.Directory)
                    ):
                        nxt.append(f"{rel}/{info.base_name}" if rel else info.base_name)
            found = nxt
        return sorted(found)

    def make_dir(self, rel: str) -> None:
        """Create the directory ``rel`` (and parents); a no-op where it exists."""
        if self.local:
            Path(self.path(rel)).mkdir(parents=True, exist_ok=True)
        else:
            self.fs.create_dir(self.path(rel), recursive=True)

    def delete(self, rel: str) -> None:
        """Remove the file ``rel``; absent already is fine."""
        try:
            self.fs.delete_file(self.path(rel))
        except FileNotFoundError:
            pass

    def move(self, src: str, dest: str) -> None:
        """Move file ``src`` to ``dest`` (both relative): a rename locally, copy + delete on object stores."""
        if self.local:
            shutil.move(self.path(src), self.path(dest))
        else:
            self.fs.move(self.path(src), self.path(dest))
