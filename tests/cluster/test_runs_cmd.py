"""`tlm runs` lists runs from the index with their task and record counts."""
import json

from cluster.cli import main
from storage import Corpus

WK1, WK2, WK3 = "0123456789abcdef", "fedcba9876543210", "00000000000000aa"


def test_runs_lists_status_tasks_and_records(tmp_path, capsys):
    c = Corpus.open(tmp_path / "corpus")
    r1 = c.start_run("collect", {"hardware": ["cpu-x-1c"]})
    c.set_task_status(WK1, "cpu-x-1c", "evolutionary", 8, "done", run_id=r1, records=8)
    c.set_task_status(WK2, "cpu-x-1c", "evolutionary", 8, "done", run_id=r1, records=7)
    c.set_task_status(WK3, "cpu-x-1c", "evolutionary", 8, "failed", run_id=r1, records=0)
    c.finish_run(r1, "partial")
    r2 = c.start_run("collect", {"hardware": ["cpu-x-1c"]})  # still running

    assert main(["runs", "--corpus", str(tmp_path / "corpus"), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["run_id"] for r in rows] == [r1, r2]
    assert (rows[0]["status"], rows[0]["tasks_done"], rows[0]["tasks_failed"], rows[0]["records"]) == ("partial", 2, 1, 15)
    assert (rows[1]["status"], rows[1]["tasks_done"], rows[1]["records"]) == ("running", 0, 0)

    assert main(["runs", "--corpus", str(tmp_path / "corpus")]) == 0
    table = capsys.readouterr().out
    assert r1[:12] in table and "partial" in table and "cpu-x-1c" in table
