"""``Corpus.run_summaries``: runs with their task and record counts (what ``tlm runs`` prints)."""
from __future__ import annotations

import datetime as dt

WK1, WK2, WK3, WK4 = "0123456789abcdef", "fedcba9876543210", "00000000000000aa", "00000000000000bb"
HW = "cpu-x-1c"


def test_run_summaries_count_tasks_and_records(corpus):
    r1 = corpus.start_run("collect", {"hardware": [HW]})
    corpus.set_task_status(WK1, HW, "evolutionary", 8, "done", run_id=r1, records=8)
    corpus.set_task_status(WK2, HW, "evolutionary", 8, "done", run_id=r1, records=7)
    corpus.set_task_status(WK3, HW, "evolutionary", 8, "failed", run_id=r1, records=0)
    corpus.set_task_status(WK4, HW, "evolutionary", 8, "running", run_id=r1, records=3)  # counts as failed
    corpus.set_task_status(WK4, HW, "evolutionary", 16, "done", records=5)  # no run: counted nowhere
    corpus.finish_run(r1, "partial")
    r2 = corpus.start_run("collect", {"hardware": HW})  # still running
    r3 = corpus.start_run("train", {})
    corpus.finish_run(r3)

    rows = corpus.run_summaries()
    assert [r["run_id"] for r in rows] == [r1, r2, r3]
    one, two, three = rows
    assert set(one) == {"run_id", "kind", "status", "tasks_done", "tasks_failed", "records", "started_at", "seconds",
                        "hardware"}
    assert (one["kind"], one["status"], one["tasks_done"], one["tasks_failed"], one["records"], one["hardware"]) == (
        "collect", "partial", 2, 2, 15, [HW])
    assert (two["status"], two["tasks_done"], two["tasks_failed"], two["records"], two["hardware"]) == (
        "running", 0, 0, 0, HW)
    assert three["hardware"] is None and three["seconds"] >= 0
    started = dt.datetime.fromisoformat(one["started_at"])
    assert started.tzinfo is not None and started.microsecond == 0
    assert [r["run_id"] for r in corpus.run_summaries(kind="collect")] == [r1, r2]
    assert [r["run_id"] for r in corpus.run_summaries(kind="train")] == [r3]
    assert corpus.run_summaries(kind="nothing") == []


def _run_started_by_a_process_that_dies(root) -> str:
    """A run opened by another process that then exits without closing it (as a SIGKILLed
    driver leaves it): its id."""
    import subprocess
    import sys

    code = ("import sys; from storage import Corpus; c = Corpus.open(sys.argv[1]); "
            "r = c.start_run('collect', {'hardware': 'cpu-x-1c'}); "
            "c.set_task_status('0123456789abcdef', 'cpu-x-1c', 'evolutionary', 8, 'running', run_id=r); print(r)")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_run_whose_driver_died_is_listed_as_interrupted_not_running(tmp_path, capsys):
    """Issue 34: a collection whose driver was killed stayed "running" in ``tlm runs`` forever."""
    import json

    from cluster.cli import main
    from storage import Corpus

    root = tmp_path / "corpus"
    dead = _run_started_by_a_process_that_dies(root)
    c = Corpus.open(root)
    alive = c.start_run("collect", {"hardware": HW})  # this process: alive
    assert main(["runs", "--corpus", str(root), "--json"]) == 0
    rows = {r["run_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows[dead]["status"] == "interrupted" and rows[alive]["status"] == "running"
    assert c.task_status(WK1, HW, "evolutionary", 8) == "interrupted"
    assert c.reap_orphaned_runs() == []  # once
    c.close()


def test_the_next_run_marks_a_dead_drivers_run_and_leaves_other_hosts_runs_alone(tmp_path):
    import json

    import sqlalchemy as sa

    from storage import Corpus
    from storage import index as ix

    root = tmp_path / "corpus"
    dead = _run_started_by_a_process_that_dies(root)
    c = Corpus.open(root)
    elsewhere = c.start_run("collect", {})
    with ix.write(c.engine) as conn:  # driven from another machine: this host cannot tell
        conn.execute(sa.update(ix.runs).where(ix.runs.c.run_id == elsewhere).values(
            driver_json=json.dumps({"host": "another-host", "pid": 1, "start": None})))
    c.start_run("collect", {})
    status = {r["run_id"]: r["status"] for r in c.runs()}
    assert (status[dead], status[elsewhere]) == ("interrupted", "running")
    c.close()
