"""The seed corpus shipped in data/corpus/ verifies: every part's checksum matches the index,
no record is stored twice, and every record's workload and hardware are registered (a fast
check of what is in the repository, not a re-collection)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "corpus"


def test_the_shipped_corpus_is_there():
    """A deleted or unfetched corpus fails here, loudly, instead of skipping what checks it."""
    assert (DATA / "index.sqlite").exists(), (
        f"{DATA} has no index.sqlite: restore it (git checkout -- data/corpus) or rebuild it (data/README.md)")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A copy (verify must not touch the checkout: SQLite writes its journal beside the index)."""
    root = tmp_path_factory.mktemp("shipped") / "corpus"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("*.sqlite-wal", "*.sqlite-shm"))
    return root


def test_the_shipped_corpus_verifies_from_the_cli(shipped, capsys):
    from cluster.cli import main

    assert main(["corpus", "verify", "--corpus", str(shipped)]) == 0
    assert capsys.readouterr().out.strip().endswith("OK")


def test_the_shipped_corpus_has_unique_records_of_registered_workloads(shipped):
    import pyarrow.compute as pc

    from storage import Corpus

    with Corpus.open(shipped) as c:
        table = c.scan(columns=["record_id", "workload_key", "hardware_key", "latency_s", "error"])
        assert table.num_rows > 0
        assert pc.count_distinct(table["record_id"]).as_py() == table.num_rows
        assert {w["workload_key"] for w in c.workloads()} >= set(table["workload_key"].unique().to_pylist())
        assert all(c.hardware_info(k) for k in table["hardware_key"].unique().to_pylist())
        ok = pc.is_valid(table["latency_s"])
        assert pc.all(pc.xor(ok, pc.is_valid(table["error"]))).as_py(), "each record: a latency or an error"


def test_the_data_readme_lists_every_hardware_key(shipped):
    """A slice merged or collected on a new machine must be described where users look."""
    from storage import Corpus

    text = (DATA.parent / "README.md").read_text()
    with Corpus.open(shipped) as c:
        keys = set(c.stats()["by_hardware"])
    assert len(keys) >= 2 and all(f"`{k}`" in text for k in keys), keys


def test_parts_written_before_a_column_was_added_read_with_it_null(shipped):
    """The shipped parts predate ``host_load``: a top-k read (row groups of one part) and a scan
    both give it back as null (the top-k read once failed: its cast refused the missing column)."""
    from storage import Corpus

    with Corpus.open(shipped) as c:
        key = "cpu-znver3-2c"
        wk = next(iter(c.best_latencies(key)))
        rows = c.top_k(wk, key, k=200).to_pylist()
        assert rows and all("host_load" in r for r in rows)
        assert any(r["host_load"] is None for r in rows)
        assert c.scan(columns=["host_load"]).num_rows > 0


def test_a_whole_models_best_records_in_one_lookup_equal_each_top_1(shipped):
    """``best_records`` (the compile's corpus-first lookup) gives, for every workload a key
    measured, the record ``top_k(k=1)`` gives; a workload it never measured is absent."""
    from storage import Corpus

    with Corpus.open(shipped) as c:
        key = "cpu-znver3-2c"
        keys = sorted(c.best_latencies(key))
        best = c.best_records(keys + ["0123456789abcdef"], key)
        assert set(best) == set(keys)
        for wk in keys[:: max(1, len(keys) // 25)]:
            assert best[wk]["record_id"] == c.top_k(wk, key, k=1).column("record_id")[0].as_py()
        assert c.best_records(keys, "cpu-nosuchcpu-2c") == {}


def test_the_summary_script_refuses_a_path_that_is_no_corpus_and_creates_nothing(tmp_path):
    """``scripts/corpus_summary.py --help`` opened ``--help`` as a corpus and left a directory of
    that name behind."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "corpus_summary.py"
    ok = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0 and "CORPUS" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "no-such-corpus"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "no-such-corpus" in bad.stderr
    assert list(tmp_path.iterdir()) == []
