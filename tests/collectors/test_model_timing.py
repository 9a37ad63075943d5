"""Timing a whole compiled model (collectors/compile.py ``time_model``, ``time_side_by_side``): a
slow model is run a handful of times, not fifty, and two builds far apart are told apart without
timing both five rounds. Timing an untuned BERT-base (over a minute a run on 2 cores, by the timing it took) kept
`tlm compile --model bert_base` at budget 0 busy for over 20 minutes after 9 s of scheduling."""
from __future__ import annotations

import time

import numpy as np
import pytest


def _model_calling(name: str, body) -> object:
    """A compiled model whose one run is a call of the Python function ``body``."""
    import tvm
    from tvm import relax

    from collectors.compile import compile_model
    from collectors.hardware import detect_hardware

    tvm.register_global_func(name, lambda x, out: body(), override=True)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.call_dps_packed(name, [x], out_ty=relax.TensorType((4,), "float32")))
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
    medians, every = time_side_by_side({"slow": builds["slow"], "fast": builds["fast"]}, X, hw)
    assert medians["fast"] * 10 < medians["slow"]
    assert len(every["slow"]) == 1, "a first timing of one run each tells them apart"
    assert len(every["fast"]) == SIDE_BY_SIDE_RUNS, "the fast one's figure is a median of rounds, not one repeat"
    _, apart = time_side_by_side({"slow": builds["slow"], "half": builds["half"]}, X, hw)
    assert len(apart["slow"]) == 2, "2.5x apart: two rounds, then stopped"
    _, close = time_side_by_side({"a": builds["half"], "b": builds["half"]}, X, hw)
    assert len(close["a"]) == SIDE_BY_SIDE_RUNS, "two builds alike are timed every round"
