"""Corpus roots given as ``pyarrow.fs`` URIs.

``file://`` runs the whole suite through the ``corpus_root`` fixture; here: what only a URI root
does. ``mock://`` is pyarrow's in-memory filesystem, a non-local filesystem that takes the same
code path as ``s3://`` (there is no S3 server here: no network, no MinIO, so none is faked).
"""
from __future__ import annotations

import hashlib
import pickle

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import storage.parts
from storage import Corpus, CorpusError
from storage.corpus import TOP_CACHE
from tests.helpers.records import HW, check_consistent, local_dir, make_records

OTHER_HW = "cuda-sm_90-h200"


@pytest.mark.parametrize("root", ["s3://bucket/corpus", "gs://bucket/a/b", "hdfs://namenode:8020/corpus", "mock:///x"])
def test_non_local_uri_needs_index_url(root):
    with pytest.raises(CorpusError, match="index_url") as err:
        Corpus.open(root)
    assert repr(root) in str(err.value)  # names the root


def test_uri_credentials_never_shown():
    with pytest.raises(CorpusError) as err:
        Corpus.open("s3://AKIAEXAMPLE:hunter2secret@bucket/corpus")
    assert "hunter2secret" not in str(err.value) and "AKIAEXAMPLE:***@bucket" in str(err.value)


def test_unknown_scheme_is_a_clear_error(tmp_path):
    with pytest.raises(CorpusError, match=r"cannot open corpus root 'nosuch://x/y'"):
        Corpus.open("nosuch://x/y", index_url=f"sqlite:///{tmp_path / 'i.sqlite'}")


def test_file_uri_and_path_are_the_same_corpus(tmp_path):
    d = tmp_path / "corpus"
    with Corpus.open(d) as by_path:
        by_path.append(make_records(10))
    with Corpus.open(d.as_uri()) as by_uri:  # same default index: <dir>/index.sqlite
        assert isinstance(by_uri.root, str) and by_uri.root == d.as_uri()
        assert by_uri.scan().num_rows == 10
        by_uri.append(make_records(5, start=10))
        assert by_uri.verify().ok
    with Corpus.open(d) as again:
        assert check_consistent(again) == 15


def test_file_uri_parts_readable_by_plain_pyarrow(tmp_path):
    root = (tmp_path / "corpus").as_uri()
    c = Corpus.open(root)
    c.append(make_records(12))
    c.append(make_records(8, hardware=OTHER_HW, start=100))
    fs, base = pafs.FileSystem.from_uri(root)
    # 1. the whole corpus, hive-partitioned, with the filesystem of the URI
    table = ds.dataset(base, filesystem=fs, format="parquet", partitioning="hive",
                       ignore_prefixes=[".", "_", "quarantine", "index"]).to_table()
    assert table.num_rows == 20 and set(table["hardware"].to_pylist()) == {HW, OTHER_HW}
    # 2. the index's relative part paths resolve inside a SubTreeFileSystem at the root
    sub = pafs.SubTreeFileSystem(base, fs)
    rel = [f.removeprefix(c.fs_path() + "/") for f in c.dataset().files]
    assert sorted(r.split("/")[0] for r in rel) == sorted([f"hardware={OTHER_HW}", f"hardware={HW}"])
    rows = ds.dataset(rel, filesystem=sub, format="parquet").count_rows()
    assert rows == 20
    # 3. Corpus.dataset(): its files belong to Corpus.filesystem (what Ray Data needs)
    files = c.dataset(hardware_key=OTHER_HW).files
    assert len(files) == 1 and pq.read_table(files[0], filesystem=c.filesystem).num_rows == 8
    c.close()


def test_corpus_with_uri_root_pickles(tmp_path):
    c = Corpus.open((tmp_path / "corpus").as_uri())
    c.append(make_records(4))
    clone = pickle.loads(pickle.dumps(c))
    assert clone.root == c.root and clone.scan().num_rows == 4
    clone.close()
    c.close()


@pytest.fixture
def mock_corpus(tmp_path):
    """A corpus on pyarrow's in-memory filesystem (lives as long as this Corpus object)."""
    c = Corpus.open("mock:///bucket/corpus", index_url=f"sqlite:///{tmp_path / 'index.sqlite'}")
    assert c.filesystem.type_name == "mock"
    yield c
    c.close()


def test_non_local_round_trip(tmp_path, mock_corpus):
    c = mock_corpus
    a = c.append(make_records(TOP_CACHE + 10, workloads=1))
    c.append(make_records(TOP_CACHE + 10, workloads=1, start=100, seed=3))
    c.append(make_records(5, hardware=OTHER_HW, start=500))
    assert a.part_path.startswith(f"hardware={HW}/part-")
    assert all(p.name.startswith("index.sqlite") for p in tmp_path.iterdir())  # no part on local disk
    # the stored sha256 is that of the bytes at the final key (hashed while streaming)
    for p in c._registered_parts():
        with c.filesystem.open_input_stream(c.fs_path(p["path"])) as f:
            data = f.read()
        assert hashlib.sha256(data).hexdigest() == p["sha256"] and len(data) == p["bytes"]
    # no temporary key is left behind after a successful append
    listing = c.filesystem.get_file_info(pafs.FileSelector(c.fs_path(), recursive=True))
    assert not [i.path for i in listing if i.base_name.startswith(".")]
    assert check_consistent(c) == 2 * (TOP_CACHE + 10) + 5
    everything = sorted(c.scan({"hardware_key": HW}).to_pylist(), key=lambda r: (r["latency_s"], r["record_id"]))
    k = 2 * TOP_CACHE + 5  # beyond the payload cache: read from the parts' row groups
    assert c.top_k(f"{0:016x}", HW, k).to_pylist() == everything[:k]
    assert c.verify().ok


def test_non_local_corruption_is_quarantined(mock_corpus):
    c = mock_corpus
    c.append(make_records(30))
    bad = c.append(make_records(20, start=30)).part_path
    fs = c.filesystem
    with fs.open_input_stream(c.fs_path(bad)) as f:
        data = f.read()
    with fs.open_output_stream(c.fs_path(bad)) as f:
        f.write(data[: len(data) // 2])
    report = c.verify()
    assert [p for p, _ in report.quarantined] == [bad] and "sha256" in report.quarantined[0][1]
    moved = "quarantine/" + bad.replace("/", "__")
    assert fs.get_file_info(c.fs_path(moved)).type == pafs.FileType.File
    assert fs.get_file_info(c.fs_path(bad)).type == pafs.FileType.NotFound
    assert c.scan().num_rows == 30 and check_consistent(c) == 30 and c.verify().ok


def test_non_local_failed_write_leaves_nothing_and_reindex_cleans_temp(mock_corpus, monkeypatch):
    c = mock_corpus
    c.append(make_records(10))

    def broken(table, where, **kw):
        where.write(b"PAR1 half a part")
        raise OSError("connection reset (injected)")

    monkeypatch.setattr(storage.parts.pq, "write_table", broken)
    with pytest.raises(OSError, match="injected"):
        c.append(make_records(5, start=10))
    monkeypatch.undo()
    assert c.verify().ok  # the temp key was removed, nothing registered
    # a temp key left by a killed writer is reported by verify and removed by reindex
    tmp = f"hardware={HW}/.part-{'0' * 32}.parquet.tmp"
    with c.filesystem.open_output_stream(c.fs_path(tmp)) as f:
        f.write(b"partial")
    assert c.verify().temp_files == [tmp]
    rep = c.reindex()
    assert rep.temp_removed == [tmp] and rep.records == 10
    assert c.verify().ok and check_consistent(c) == 10


def test_plain_path_still_fsyncs_file_and_directory(tmp_path, monkeypatch):
    synced = []
    real = storage.parts.os.fsync
    monkeypatch.setattr(storage.parts.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    with Corpus.open(tmp_path / "c") as c:
        c.append(make_records(3))
    assert len(synced) >= 3  # new hardware dir's parent, the part file, its directory
    synced.clear()
    with Corpus.open((tmp_path / "u").as_uri()) as u:
        u.append(make_records(3))
    assert synced == []  # a URI root relies on the filesystem's own durability (documented)
    assert local_dir(u).joinpath("index.sqlite").exists()
