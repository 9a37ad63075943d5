"""bench/hardware.py's arithmetic: speeds relative to the key's own model, the targets table."""
from __future__ import annotations

import pytest

from bench.hardware import relative, report_md, targets


def _rows() -> list[dict]:
    lat = {"a": {"own": 2.0, "zero_shot": 4.0, "few_shot_200": 2.0},
           "b": {"own": 1.0, "zero_shot": 1.0, "few_shot_200": None}}
    return [{"task": t, "methods": {n: {"latency_s": v} for n, v in m.items()}} for t, m in lat.items()]


def test_speed_relative_to_the_own_model():
    z = relative(_rows(), "zero_shot")
    assert z["tasks"] == {"a": 0.5, "b": 1.0}
    assert z["geomean"] == pytest.approx(0.5 ** 0.5) and z["worst"] == 0.5
    f = relative(_rows(), "few_shot_200")
    assert f["tasks"]["b"] is None and f["geomean"] == 1.0  # a failed task is left out, never counted as a speed


def test_targets_name_what_is_met():
    res = {"keys": {"cpu-a-2c": {}, "cpu-b-2c": {}}, "zero_shot": {"geomean": 0.6},
           "few_shot": [{"n": 0, "geomean": 0.6}, {"n": 200, "geomean": 0.97, "adapt_wall_s": 300.0},
                        {"n": 5000, "geomean": 1.2}]}
    got = {t["figure"].split(" (")[0].split(",")[0]: (round(t["value"], 2), t["met"]) for t in targets(res)}
    assert got["keys in data/corpus"] == (2, True)
    assert got["zero-shot top-1 vs the key's own model"] == (0.6, False)
    assert got["after <= 1000 local measurements"] == (0.97, True)  # N=5000 does not count for this target
    assert got["tlm adapt wall time"] == (5.0, True)
    md = report_md(res | {"hardware": "cpu-a-2c", "machine": {"cpu": "x"}, "keys": {}, "targets": targets(res)})
    assert "| zero-shot top-1 vs the key's own model | 0.60 | >= 0.7 | no |" in md
