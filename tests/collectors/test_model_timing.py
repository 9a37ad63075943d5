"""Timing a whole compiled model (collectors/compile.py ``time_model``): a slow model is run a
handful of times, not fifty. Timing an untuned BERT-base (seconds a run) took over 20 minutes of
`tlm compile --model bert_base` at budget 0 while TVM's evaluator ran it 10 x 5 times per timing."""
from __future__ import annotations

import time

import numpy as np
import pytest


@pytest.fixture(scope="module")
def slow_model():
    """A compiled model whose one run is a 30 ms Python call, counted."""
    import tvm
    from tvm import relax

    from collectors.compile import compile_model
    from collectors.hardware import detect_hardware

    calls: list[int] = []

    @tvm.register_global_func("tlm_test.slow_identity", override=True)
    def _slow(x, out):  # noqa: ARG001 - the destination is left as it is
        calls.append(1)
        time.sleep(0.03)

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.call_dps_packed("tlm_test.slow_identity", [x],
                                                     out_ty=relax.TensorType((4,), "float32")))
        bb.emit_func_output(y)
    hw = detect_hardware()
    return compile_model(bb.get(), hw), hw, calls


def test_a_model_slower_than_a_repeat_runs_once_per_repeat(slow_model):
    from collectors.compile import time_model

    exe, hw, calls = slow_model
    calls.clear()
    s = time_model(exe, [np.ones(4, "float32")], hw)
    assert 0.025 < s < 0.1
    assert len(calls) <= 12, f"{len(calls)} runs to time a 30 ms model"


def test_side_by_side_stops_once_one_build_is_clearly_faster(slow_model):
    """Which build ships (the served one or TVM's untuned) needs the medians of runs in turn only
    while they are close: an untuned BERT-base ~20x slower than the served build was timed 5 x 5
    times all the same."""
    from tvm import relax

    from collectors.compile import SIDE_BY_SIDE_RUNS, compile_model, time_side_by_side

    exe, hw, _ = slow_model
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(y)
    fast = compile_model(bb.get(), hw)
    medians, every = time_side_by_side({"slow": exe, "fast": fast}, [np.ones(4, "float32")], hw)
    assert medians["fast"] * 10 < medians["slow"]
    assert len(every["slow"]) == len(every["fast"]) == 2 < SIDE_BY_SIDE_RUNS
    _, close = time_side_by_side({"a": fast, "b": fast}, [np.ones(4, "float32")], hw)
    assert len(close["a"]) == SIDE_BY_SIDE_RUNS, "two builds alike are timed every run"
