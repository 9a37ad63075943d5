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
