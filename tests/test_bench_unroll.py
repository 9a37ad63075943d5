"""bench/studies/unroll.py's verdicts: a step wins or loses a task only when both calls agree."""
from __future__ import annotations

import pytest

from bench.studies.unroll import verdicts


def test_a_step_wins_or_loses_a_task_only_when_both_calls_put_it_clearly_apart():
    rows = [{"task_id": "won", "calls": [{"u64": 2.0, "u512": 1.0}, {"u64": 1.5, "u512": 1.0}]},
            {"task_id": "lost", "calls": [{"u64": 1.0, "u512": 2.0}, {"u64": 1.0, "u512": 1.2}]},
            {"task_id": "noise", "calls": [{"u64": 1.5, "u512": 1.0}, {"u64": 1.0, "u512": 1.3}]},
            {"task_id": "one call", "calls": [{"u64": 9.0, "u512": 1.0}]}]
    v = verdicts(rows, [64, 512], 64)["u512"]
    assert (v["wins"], v["losses"], v["ties"], v["tasks"]) == (["won"], ["lost"], 1, 3)
    # geomean over tasks of each task's two-call geomean: sqrt(2*1.5), sqrt(0.5/1.2), sqrt(1.5/1.3)
    assert v["speed_over_rules"] == pytest.approx((3 * (0.5 / 1.2) * (1.5 / 1.3)) ** (1 / 6))
