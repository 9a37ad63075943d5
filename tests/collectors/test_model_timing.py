"""Timing a whole compiled model (collectors/compile.py ``time_model``, ``time_side_by_side``): a
slow model is run a handful of times, not fifty, and two builds far apart are told apart without
timing both five rounds. Timing an untuned BERT-base (over a minute a run on 2 cores, by the timing it took) kept
`tlm compile --model bert_base` at budget 0 busy for over 20 minutes after 9 s of scheduling."""
from __future__ import annotations

import time

import numpy as np
import pytest


def _model_calling(name: str, body, calls: int = 1) -> object:
    """A compiled model whose one run is ``calls`` calls, one after the other, of the Python
    function ``body``."""
    import tvm
    from tvm import relax

    from collectors.compile import compile_model
    from collectors.hardware import detect_hardware

    tvm.register_global_func(name, lambda x, out: body(), override=True)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for _ in range(calls - 1):
                y = bb.emit(relax.call_dps_packed(name, [y], out_ty=relax.TensorType((4,), "float32")))
            y = bb.emit_output(relax.call_dps_packed(name, [y], out_ty=relax.TensorType((4,), "float32")))
        bb.emit_func_output(y)
    return compile_model(bb.get(), detect_hardware())


@pytest.fixture(scope="module")
def models():
    """Three models: 30 ms a run (counted), 12 ms, and ~nothing."""
    calls: list[int] = []
    slow = _model_calling("tlm_test.sleep_30ms", lambda: (calls.append(1), time.sleep(0.03)))
    half = _model_calling("tlm_test.sleep_12ms", lambda: time.sleep(0.012))
    fast = _model_calling("tlm_test.no_sleep", lambda: None)
    return {"slow": slow, "half": half, "fast": fast}, calls


X = [np.ones(4, "float32")]


def test_a_model_slower_than_a_repeat_runs_once_per_repeat(models):
    from collectors.compile import time_model
    from collectors.hardware import detect_hardware

    builds, calls = models
    calls.clear()
    s = time_model(builds["slow"], X, detect_hardware())
    assert 0.025 < s < 0.1
    assert len(calls) <= 12, f"{len(calls)} runs to time a 30 ms model"


def test_side_by_side_stops_once_one_build_is_clearly_faster(models):
    """Which build ships (the served one or TVM's untuned) needs the medians of runs in turn only
    while they are close."""
    from collectors.compile import SIDE_BY_SIDE_RUNS, time_side_by_side
    from collectors.hardware import detect_hardware

    builds, _ = models
    hw = detect_hardware()
    medians, every, _ = time_side_by_side({"slow": builds["slow"], "fast": builds["fast"]}, X, hw)
    assert medians["fast"] * 10 < medians["slow"]
    assert len(every["slow"]) == 1, "a first timing of one run each tells them apart"
    assert len(every["fast"]) == SIDE_BY_SIDE_RUNS, "the fast one's figure is a median of rounds, not one repeat"
    _, apart, _ = time_side_by_side({"slow": builds["slow"], "half": builds["half"]}, X, hw)
    assert len(apart["slow"]) == 2, "2.5x apart: two rounds, then stopped"
    _, close, _ = time_side_by_side({"a": builds["half"], "b": builds["half"]}, X, hw)
    assert len(close["a"]) == SIDE_BY_SIDE_RUNS, "two builds alike are timed every round"


def test_a_build_far_slower_than_the_first_is_stopped_before_its_run_ends():
    """An untuned LLaMA-7B layer is minutes a run on 2 cores (one warm-up and one timed run, over
    15 minutes of `tlm compile --model llama7b_layer` after 2 s of scheduling), to learn only that
    it is far slower than the served build. Past PROBE_GAP times the first build's probe, the rest of
    its run's kernels are skipped (never before STOP_NOT_BEFORE_S: a build's first run pays its cold
    start) and its figure is a lower bound, said so."""
    from collectors.compile import STOP_NOT_BEFORE_S, time_side_by_side
    from collectors.hardware import detect_hardware

    calls: list[int] = []
    slow = _model_calling("tlm_test.sleep_10ms_counted", lambda: (calls.append(1), time.sleep(0.01)), calls=400)
    first = _model_calling("tlm_test.sleep_5ms", lambda: time.sleep(0.005))
    timed = time_side_by_side({"served": first, "untuned": slow}, X, detect_hardware())
    assert timed.at_least == {"untuned"}
    assert STOP_NOT_BEFORE_S <= timed.medians["untuned"] < 2.5, "stopped past a second, far before its 4 s run ends"
    assert len(calls) < 250, f"{len(calls)} of its kernels ran"
    assert len(timed.runs["served"]) >= 2 and timed.at_least == {"untuned"}
    whole = time_side_by_side({"served": first, "half": _model_calling("tlm_test.sleep_12ms", lambda: time.sleep(0.012))},
                              X, detect_hardware())
    assert not whole.at_least and whole.medians["half"] > 0.01, "a build within the gap is timed whole"
