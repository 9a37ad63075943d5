"""Damage and crashes: corrupt parts are quarantined by name, crashes leave nothing half-visible,
and reindex rebuilds exactly the index that incremental appends built."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from storage import Corpus
from tests.helpers.records import HW, check_consistent, index_snapshot, local_dir, make_records

ROOT = Path(__file__).resolve().parents[2]  # worker subprocesses import tests.helpers from here


def _first_part(corpus) -> Path:
    (p,) = [x for x in local_dir(corpus).glob("hardware=*/part-*.parquet")][:1]
    return p


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_part_quarantined(corpus, damage):
    corpus.append(make_records(30))
    bad = corpus.append(make_records(20, start=30)).part_path
    path = local_dir(corpus) / bad
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))

    report = corpus.verify()
    assert not report.ok
    assert [p for p, _ in report.quarantined] == [bad]
    assert "sha256" in report.quarantined[0][1]
    assert any(bad in line and line.startswith("QUARANTINED") for line in report.lines())
    assert not path.exists()
    assert (local_dir(corpus) / "quarantine" / bad.replace("/", "__")).exists()
    assert corpus.scan().num_rows == 30  # the bad part's rows are gone from scan and index
    assert check_consistent(corpus) == 30
    assert corpus.verify().ok  # reported once, then the corpus is clean


def test_missing_part_reported(corpus):
    corpus.append(make_records(10))
    gone = corpus.append(make_records(5, start=10)).part_path
    (local_dir(corpus) / gone).unlink()
    report = corpus.verify()
    assert report.missing == [gone] and not report.ok
    assert check_consistent(corpus) == 10


def test_reindex_equals_incremental_index(corpus):
    corpus.append(make_records(40, error_every=6))
    corpus.append(make_records(30, start=20))  # ids 20..49: 20 duplicates dropped, 10 new
    corpus.append(make_records(25, hardware="cuda-sm_90-h200", start=500))
    corpus.append(make_records(5, start=1000, workloads=1))
    before = index_snapshot(corpus)
    top_before = corpus.top_k(f"{0:016x}", HW, 4).to_pylist()
    report = corpus.reindex()
    assert report.ok and (report.parts, report.records) == (4, 80)
    assert index_snapshot(corpus) == before
    assert corpus.top_k(f"{0:016x}", HW, 4).to_pylist() == top_before
    check_consistent(corpus)


def test_reindex_into_empty_index(corpus_root):
    root = local_dir(corpus_root)
    c = Corpus.open(corpus_root)
    c.append(make_records(40))
    c.append(make_records(10, hardware="cuda-sm_90-h200"))
    before = index_snapshot(c)
    c.close()
    (root / "index.sqlite").unlink()
    for extra in ("index.sqlite-wal", "index.sqlite-shm"):
        (root / extra).unlink(missing_ok=True)
    fresh = Corpus.open(corpus_root)
    assert fresh.scan().num_rows == 0  # nothing registered in the new index yet
    assert [*fresh.verify().unregistered] == sorted(p[0] for p in before[0])
    fresh.reindex()
    assert index_snapshot(fresh) == before


WORKER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {here!r})
    import storage.corpus, storage.parts
    from storage import Corpus
    from tests.helpers.records import make_records

    c = Corpus.open({root!r}, index_url={url!r})
    c.append(make_records(20))            # committed before the crash
    ready = {ready!r}
    def stall(*a, **k):
        open(ready, "w").close()
        time.sleep(600)
    if {phase!r} == "write":              # killed while the part is still a temp file
        real = storage.parts.pq.write_table
        def write_then_stall(table, where, **kw):
            real(table, where, **kw)
            stall()
        storage.parts.pq.write_table = write_then_stall
    else:                                 # killed after the rename, before the index commit
        storage.corpus.Corpus._register = lambda self, info, table: stall()
    c.append(make_records(15, start=20))
    """
)


def _run_and_kill(tmp_path, root, url, phase) -> None:
    ready = tmp_path / "ready"
    code = WORKER.format(here=str(ROOT), root=str(root), url=url, ready=str(ready), phase=phase)
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.time() + 60
    while not ready.exists():
        assert proc.poll() is None, f"worker exited early with {proc.returncode}"
        assert time.time() < deadline, "worker never reached the crash point"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_killed_while_writing_part(tmp_path, corpus_root, index_url):
    root = corpus_root
    Corpus.open(root, index_url=index_url).close()
    _run_and_kill(tmp_path, root, index_url, "write")
    c = Corpus.open(root, index_url=index_url)
    assert list(local_dir(root).glob("hardware=*/.part-*.tmp")), "the killed writer should have left its temp file"
    assert c.scan().num_rows == 20  # the half-written part is invisible
    assert check_consistent(c) == 20
    report = c.verify()
    assert not report.ok and len(report.temp_files) == 1 and not report.unregistered
    rep = c.reindex()
    assert rep.temp_removed == report.temp_files and rep.records == 20
    assert c.verify().ok
    assert c.append(make_records(15, start=20)).rows == 15  # the job can simply be re-run
    assert check_consistent(c) == 35


def test_killed_between_rename_and_commit(tmp_path, corpus_root, index_url):
    root = corpus_root
    Corpus.open(root, index_url=index_url).close()
    _run_and_kill(tmp_path, root, index_url, "register")
    c = Corpus.open(root, index_url=index_url)
    assert c.scan().num_rows == 20  # the complete but unregistered part is not visible
    assert check_consistent(c) == 20
    report = c.verify()
    assert len(report.unregistered) == 1 and not report.ok
    orphan = report.unregistered[0]
    # The job is re-run before anyone reindexes: the same 15 records are appended again.
    assert c.append(make_records(15, start=20)).rows == 15
    rep = c.reindex()
    # The orphan now holds only duplicates: it is quarantined (named), not double-counted.
    assert [p for p, _ in rep.quarantined] == [orphan] and "duplicate" in rep.quarantined[0][1]
    assert rep.records == 35
    assert check_consistent(c) == 35
    assert c.verify().ok


def test_killed_between_rename_and_commit_then_reindex(tmp_path, corpus_root):
    root = corpus_root
    Corpus.open(root).close()
    _run_and_kill(tmp_path, root, None, "register")
    c = Corpus.open(root)
    rep = c.reindex()  # the orphan is complete: reindex registers it
    assert rep.ok and rep.records == 35
    assert check_consistent(c) == 35 and c.verify().ok


def test_killed_at_a_random_moment(corpus_root):
    """A writer appending in a loop is SIGKILLed at an arbitrary time; nothing half-done shows."""
    root = corpus_root
    Corpus.open(root).close()
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from storage import Corpus
        from tests.helpers.records import make_records
        c = Corpus.open({str(root)!r})
        i = 0
        while True:
            c.append(make_records(300, start=i * 300, seed=i))
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", code])
    c = Corpus.open(root)
    deadline = time.time() + 60
    while c.stats()["records"] < 900 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.137)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n = check_consistent(c)
    assert n >= 900 and n % 300 == 0  # only whole batches are visible
    c.reindex()
    assert check_consistent(c) % 300 == 0
    assert c.verify().ok


def test_orphan_partly_duplicate_is_rewritten(tmp_path, corpus_root):
    root = corpus_root
    Corpus.open(root).close()
    _run_and_kill(tmp_path, root, None, "register")  # orphan holds ids 20..34
    c = Corpus.open(root)
    assert c.append(make_records(5, start=20)).rows == 5  # a partial re-run stores 20..24
    rep = c.reindex()
    assert len(rep.rewritten) == 1 and not rep.quarantined
    old, new = rep.rewritten[0]
    d = local_dir(root)
    assert not (d / old).exists() and (d / "quarantine" / old.replace("/", "__")).exists()
    assert check_consistent(c) == 35 and c.verify().ok
    assert c.scan({"record_id": c.scan()["record_id"].to_pylist()}).num_rows == 35


@pytest.mark.parametrize("escape", ["../outside.parquet", "hardware=x/../../outside.parquet", "/tmp/outside.parquet"])
def test_an_index_row_whose_part_path_leaves_the_root_is_refused(corpus, escape):
    """A tampered (or foreign, via ``tlm corpus merge``) index cannot make the corpus read, move or
    delete a file outside its root: the path is refused by name."""
    import sqlalchemy as sa

    from storage import CorpusError
    from storage import index as ix

    corpus.append(make_records(5))
    with corpus.engine.begin() as conn:
        conn.execute(sa.update(ix.parts).values(path=escape))
    with pytest.raises(CorpusError, match="leaves the corpus root"):
        corpus.scan()
    with pytest.raises(CorpusError, match="leaves the corpus root"):
        corpus.verify()
