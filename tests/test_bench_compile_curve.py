"""The compile curve's figures (bench/compile_curve.py), read from hand-made points."""
from __future__ import annotations

from bench.compile_curve import markdown, targets


def _p(method: str, n: int, compile_s: float, latency_ms: float, correct: bool = True) -> dict:
    return {"method": method, "measurements": n, "compile_s": compile_s, "latency_ms": latency_ms, "correct": correct}


def test_the_targets_are_read_from_correct_points_only():
    points = [_p("untuned", 0, 10, 2.0), _p("served", 0, 30, 3.0), _p("served", 64, 90, 1.5),
              _p("served", 256, 300, 0.9), _p("metaschedule", 64, 400, 1.8), _p("metaschedule", 256, 1200, 1.0),
              _p("metaschedule", 1024, 4000, 0.5, correct=False),  # a wrong binary is no figure
              {"method": "served", "measurements": 1024, "error": "over 5400 s", "correct": False}]
    t = targets(points)
    assert t["served_unmeasured_over_untuned"] == 1.5
    assert t["at_budget"] == 256 and t["served_over_metaschedule"] == 0.9
    # MetaSchedule's best correct point is @256 (1.0 ms, 1200 s); served first reaches it @256 (300 s)
    assert t["metaschedule_largest_budget"] == 256 and t["compile_time_saved_to_reach_it"] == 4.0
    md = markdown({"machine": {"cpu": "x", "hardware_key": "k"}, "models": {"m": {"points": points, "targets": t}}})
    assert "| served | 1024 | - | - | over 5400 s |" in md and "| 4.00x | >= 10x |" in md


def test_a_served_build_that_never_reaches_metaschedule_saves_no_time():
    t = targets([_p("served", 0, 30, 3.0), _p("metaschedule", 64, 400, 1.8)])
    assert t["compile_time_saved_to_reach_it"] is None and "at_budget" not in t
    assert t["served_unmeasured_over_untuned"] is None


def test_a_second_compile_is_read_against_the_first_budgets_result():
    """The largest budget with a correct second compile gives the figure; a wrong one does not."""
    first = _p("served", 64, 90, 2.0) | {"again": {"latency_ms": 2.1, "compile_s": 9, "from_corpus": 8, "correct": True}}
    later = _p("served", 256, 300, 1.6) | {"again": {"latency_ms": 1.0, "correct": False}}
    t = targets([_p("served", 0, 30, 3.0), first, later])
    assert t["again_budget"] == 64 and abs(t["again_over_first"] - 1.05) < 1e-9
    md = markdown({"machine": {"cpu": "x", "hardware_key": "k"}, "models": {"m": {"points": [first], "targets": t}}})
    assert "| a second compile at budget 0 after one at 64 / the first's result | 1.05x | as fast (1.0x) |" in md


def test_a_second_compile_timed_in_the_same_call_as_the_first_is_read_from_that_call():
    """Two calls saw the host 11% apart; the two binaries timed in one call are the figure."""
    again = {"latency_ms": 2.4, "correct": True, "again_over_first_same_call": 1.01}
    t = targets([_p("served", 64, 90, 2.0) | {"again": again}])
    assert t["again_over_first"] == 1.01 and t["again_same_call"]
    md = markdown({"machine": {"cpu": "x", "hardware_key": "k"}, "models": {"m": {"points": [], "targets": t}}})
    assert "the first's result (the two binaries timed in one call) | 1.01x |" in md
