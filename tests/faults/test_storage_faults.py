"""Storage under faults the storage tests do not cover: a full disk during a write, a SIGKILL
inside the index transaction, and two collections writing one corpus at once."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storage import Corpus
from tests.faults.conftest import audit
from tests.helpers import subprocess_env
from tests.helpers.records import make_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MiB tmpfs mounted by the test (skipped where this process may not mount)."""
    where = tmp_path / "disk"
    where.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({got.stderr.strip()[:120]}): the full-disk fault needs one")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_during_appends_loses_nothing_reported_stored(tiny_disk, fault_row):
    """Appends fill a 3 MiB disk (parts and the SQLite index on it): each append either returns
    (its records stored) or raises; once space is freed (the tmpfs grown), the documented recovery
    (reindex) leaves a corpus that checks clean and holds every record an append reported, once,
    and the job goes on."""
    corpus = Corpus.open(tiny_disk / "corpus")
    reported: set[str] = set()
    failures, i = [], 0
    while len(failures) < 3 and i < 400:
        batch = make_records(200, start=i * 200, seed=i)
        for r in batch:  # bulky rows fill the disk in a few appends
            r["trace_json"] = r["trace_json"].replace('"v"', '"' + "v" * 2000 + f'{i}"')
        try:
            corpus.append(batch)
            reported = set(corpus.scan(columns=["record_id"])["record_id"].to_pylist())
        except Exception as exc:  # noqa: BLE001 - the disk is full: any I/O error is the fault's outcome
            failures.append(f"{type(exc).__name__}: {str(exc)[:120]}")
        i += 1
    assert failures, "the disk never filled"
    corpus.close()
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)  # space freed
    corpus = Corpus.open(tiny_disk / "corpus")
    lost, dup = audit(corpus, reported, recover=True)
    assert corpus.append(make_records(50, start=10**6)).rows == 50  # the job goes on
    assert (lost, dup) == (0, 0)
    fault_row("disk full", "part write and index commit (3 MiB tmpfs)",
              f"{len(failures)} appends raised ({failures[0][:50]}); every append that returned is readable; "
              "after space was freed: reindex, verify clean, appends go on", lost, dup)


def _python(code: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=subprocess_env(**env), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_sigkill_inside_the_index_transaction(tmp_path, fault_row):
    """The writer is SIGKILLed right after its first INSERT into the index's records table, inside
    the append's transaction: nothing of that append is visible, the earlier append is whole, and
    reindex recovers the killed append's complete part (its records were written, not reported)."""
    root = tmp_path / "corpus"
    proc = _python(f"""
        import os, signal
        import sqlalchemy as sa
        from storage import Corpus
        from tests.helpers.records import make_records
        c = Corpus.open({str(root)!r})
        c.append(make_records(100))
        print("first append stored", flush=True)

        @sa.event.listens_for(c.engine, "after_cursor_execute")
        def kill(conn, cursor, statement, *args):
            if statement.lstrip().upper().startswith("INSERT INTO RECORDS"):
                os.kill(os.getpid(), signal.SIGKILL)

        c.append(make_records(100, start=100))
        print("not reached", flush=True)
    """)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL and "first append stored" in out and "not reached" not in out, out
    corpus = Corpus.open(root)
    assert corpus.stats()["records"] == 100, "the killed transaction must not be half visible"
    reported = set(corpus.scan(columns=["record_id"])["record_id"].to_pylist())
    lost, dup = audit(corpus, reported, recover=True)
    assert corpus.stats()["records"] == 200  # the killed append's complete part, registered by reindex
    assert (lost, dup) == (0, 0)
    fault_row("SIGKILL", "inside the index transaction (after the first records INSERT)",
              "the transaction rolled back: only the first append's 100 records visible; reindex registered "
              "the killed append's complete part (200)",
              lost, dup)


@pytest.mark.slow
def test_two_collections_on_one_corpus_at_once(tmp_path, fault_row):
    """Two ``tlm collect`` processes (the plain loop) on the same corpus and index at the same time:
    both finish; no record is stored twice; the corpus checks clean."""
    root = tmp_path / "corpus"
    code = f"""
        import sys
        from cluster.cli import main
        sys.exit(main(["collect", "--model", "bert_base", "--small", "--trials", "4", "--tasks", "2",
                       "--strategy", "replay-trace", "--corpus", {str(root)!r}, "--no-ray", "--no-progress"]))
    """
    procs = [_python(code, RAY_AUTH_MODE="disabled") for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outs]
    corpus = Corpus.open(root)
    lost, dup = audit(corpus)
    n = corpus.stats()["records"]
    assert n >= 8 and (lost, dup) == (0, 0)
    fault_row("two collections at once", "tlm collect x2, one corpus and SQLite index",
              f"both finished; {n} records, each once; verify clean", lost, dup)


@pytest.mark.postgres
def test_a_postgresql_connection_dropped_mid_transaction(tmp_path, fault_row):
    """The index's PostgreSQL backend is terminated (``pg_terminate_backend``, as a server restart
    or a network cut does) right after an append's first records INSERT: the transaction is lost
    with the connection, the append deletes the part it could not register and registers it
    again on a fresh connection (its retry on ``OperationalError``), so the caller sees a normal
    append; nothing is half visible, no orphan part is left, appends go on."""
    import os

    import sqlalchemy as sa

    from tests.helpers.pg import fresh_pg_database

    base = os.environ.get("TLM_TEST_PG_URL")
    if not base:
        pytest.skip("TLM_TEST_PG_URL is not set (CI starts PostgreSQL: .ci/run)")
    with fresh_pg_database(base, "tlm_fault") as url:
        c = Corpus.open(tmp_path / "corpus", index_url=url)
        c.append(make_records(100))
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        dropped, failed = [], []

        @sa.event.listens_for(c.engine, "after_cursor_execute")
        def drop(conn, cursor, statement, *args):
            if not dropped and statement.lstrip().upper().startswith("INSERT INTO RECORDS"):
                pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
                with admin.connect() as a:
                    a.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
                dropped.append(pid)

        @sa.event.listens_for(c.engine, "handle_error")
        def seen(ctx):
            failed.append(type(ctx.original_exception).__name__)

        got = c.append(make_records(100, start=100))
        assert dropped and failed, "the connection was not dropped inside the transaction"
        assert (got.rows, got.duplicates) == (100, 0) and c.stats()["records"] == 200
        parts = sorted(p.name for p in (tmp_path / "corpus").rglob("*.parquet"))
        assert len(parts) == 2, f"the part of the dropped transaction is left behind: {parts}"
        c.append(make_records(100, start=200))
        reported = set(c.scan(columns=["record_id"])["record_id"].to_pylist())
        lost, dup = audit(c, reported)
        assert c.stats()["records"] == 300 and len(reported) == 300
        admin.dispose()
        c.close()
    assert (lost, dup) == (0, 0)
    fault_row("PostgreSQL connection dropped", "inside the index transaction (pg_terminate_backend after the "
              "first records INSERT)", f"the transaction died with the connection ({failed[0]}); the append "
              "deleted its unregistered part and registered it again on a new connection; appends go on (300)",
              lost, dup)
