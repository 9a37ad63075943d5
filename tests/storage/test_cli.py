"""``tlm corpus ...`` through the real CLI entry point (in-process)."""
from __future__ import annotations

import json

from cluster.cli import main
from storage import Corpus
from tests.helpers.records import HW, make_records


def test_stats_verify_reindex(tmp_path, capsys):
    root = tmp_path / "c"
    c = Corpus.open(root)
    c.append(make_records(30, error_every=4))
    bad = c.append(make_records(10, start=30, hardware="cuda-sm_90-h200")).part_path
    c.close()
    assert main(["corpus", "stats", "--corpus", str(root)]) == 0
    out = capsys.readouterr().out
    assert HW in out and "cuda-sm_90-h200" in out and "total" in out
    total = next(l for l in out.splitlines() if l.startswith("total")).split()
    assert total[1:4] == ["40", "32", "8"]  # records, ok, errors

    assert main(["corpus", "stats", "--json", "--corpus", str(root)]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 40

    assert main(["corpus", "verify", "--corpus", str(root)]) == 0
    assert capsys.readouterr().out.strip().endswith("OK")
    (root / bad).write_bytes((root / bad).read_bytes()[:100])
    assert main(["corpus", "verify", "--corpus", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"QUARANTINED {bad}" in out and "PROBLEMS FOUND" in out
    assert main(["corpus", "reindex", "--corpus", str(root)]) == 0
    assert "indexed 1 part(s), 30 record(s)" in capsys.readouterr().out


def test_errors_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    assert main(["corpus", "stats", "--corpus", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("error: no corpus at")
    (tmp_path / "c").mkdir()
    assert main(["corpus", "stats", "--corpus", str(tmp_path / "c"), "--index-url", "bogus://x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot open the corpus index at bogus://x") and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("TLM_CORPUS", str(tmp_path / "c"))
    assert main(["corpus", "export-ms", str(tmp_path / "o"), "--hardware-key", "GPU!"]) == 2
    assert "does not match" in capsys.readouterr().err


def test_stats_and_verify_of_a_uri_root(tmp_path, capsys):
    # A corpus root given as a pyarrow.fs URI (here file://) works from the CLI too; it was
    # refused as "no corpus" by a local-directory check.
    root = tmp_path / "c"
    index = f"sqlite:///{tmp_path / 'index.sqlite'}"
    uri = root.as_uri()
    with Corpus.open(uri, index_url=index) as c:
        c.append(make_records(12))
    assert main(["corpus", "stats", "--json", "--corpus", uri, "--index-url", index]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 12
    assert main(["corpus", "verify", "--corpus", uri, "--index-url", index]) == 0
    assert capsys.readouterr().out.strip().endswith("OK")


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    """`tlm corpus stats | head -1`: the pipe closes before tlm writes; no traceback, exit 0."""
    import subprocess
    import sys

    root = tmp_path / "c"
    with Corpus.open(root) as c:
        c.append(make_records(10))
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", "corpus", "stats", "--corpus", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]


def test_every_command_takes_the_corpus_and_index_from_the_environment(tmp_path, monkeypatch, capsys):
    """One convention: --corpus defaults to $TLM_CORPUS and --index-url to $TLM_INDEX_URL in every
    command, so with a shared index in the environment they all read and write the same one."""
    root, index = tmp_path / "c", f"sqlite:///{tmp_path / 'shared.sqlite'}"
    with Corpus.open(root, index_url=index) as c:
        c.append(make_records(5))
        run_id = c.start_run("collect", {"tuner": "test"})
    monkeypatch.setenv("TLM_CORPUS", str(root))
    monkeypatch.setenv("TLM_INDEX_URL", index)
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    assert run_id in capsys.readouterr().out
    assert main(["corpus", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 5
    assert main(["models", "--json"]) == 0
    monkeypatch.delenv("TLM_INDEX_URL")  # the corpus's own SQLite file: a different index, no runs
    assert main(["runs", "--json"]) == 0
    assert run_id not in capsys.readouterr().out
