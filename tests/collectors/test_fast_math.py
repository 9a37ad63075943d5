"""The vectorized float32 exp of whole-model builds (collectors/fast_math.py): exact to a few ulp,
the special values right, no libm call per lane inside the context and TVM's lowering outside."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.fast_math import fast_exp


def _exp_kernel(n: int = 4096, lanes: int = 16, op=None):
    import tvm
    from tvm import te

    from collectors.hardware import detect_hardware

    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: (op or te.exp)(a[i]), name="B")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    _, inner = sch.split(sch.get_loops(sch.get_sblock("B"))[0], [None, lanes])
    sch.vectorize(inner)
    return tvm.compile(sch.mod, target=detect_hardware("cpu").target)


def _run(lib, x: np.ndarray) -> np.ndarray:
    import tvm

    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros_like(x), dev)
    lib.mod["main"](tvm.runtime.tensor(x, dev), out)
    return out.numpy()


def _libm_calls(lib, name: str = "expf") -> int:
    return lib.mod.inspect_source("asm").count(name)


def test_a_vector_exp_is_arithmetic_inside_the_context_and_exact_to_a_few_ulp():
    x = np.random.default_rng(0).uniform(-87, 87, 4096).astype("float32")
    x[:6] = [0.0, -np.inf, np.inf, np.nan, -100.0, 1.0]
    with fast_exp():
        fast = _exp_kernel()
    y, want = _run(fast, x), np.exp(x.astype("float64"))
    finite = np.abs(x) < 87
    assert np.max(np.abs(y[finite] - want[finite]) / want[finite]) < 2e-7
    assert y[0] == 1.0 and y[1] == 0.0 and y[2] == np.inf and np.isnan(y[3]) and y[4] == 0.0
    assert _libm_calls(fast) == 0


def test_outside_the_context_exp_stays_tvms_libm_call():
    with fast_exp():
        _exp_kernel()  # the lowering rule is registered now, for the whole process
    plain = _exp_kernel()
    x = np.linspace(-20, 20, 4096, dtype="float32")
    np.testing.assert_allclose(_run(plain, x), np.exp(x), rtol=1e-6)
    assert _libm_calls(plain) > 0


def test_a_vector_erf_is_arithmetic_inside_the_context_and_exact_to_a_few_ulp():
    """BERT's exact GELU (``x * (0.5 + 0.5 * erf(x / sqrt 2))``) made one libm ``erff`` call per
    lane: 600 us a layer for its 128 x 3072 activations (Rocket Lake), 7 ms of the whole model."""
    import math

    from tvm import te

    x = np.random.default_rng(0).uniform(-6, 6, 4096).astype("float32")
    x[:5] = [0.0, -np.inf, np.inf, np.nan, 1e-6]
    with fast_exp():
        fast = _exp_kernel(op=te.erf)
    y = _run(fast, x)
    want = np.array([math.erf(v) if np.isfinite(v) else np.sign(v) for v in x.astype("float64")])
    finite = np.isfinite(x)
    assert np.max(np.abs(y[finite] - want[finite])) < 4e-7  # ~5 ulp of float32 near 1
    assert y[0] == 0.0 and y[1] == -1.0 and y[2] == 1.0 and np.isnan(y[3]) and abs(y[4] - want[4]) < 1e-12
    assert _libm_calls(fast, "erf") == 0
    plain = _exp_kernel(op=te.erf)
    np.testing.assert_allclose(_run(plain, x)[finite], want[finite], atol=2e-7)
    assert _libm_calls(plain, "erf") > 0  # outside the context: TVM's own lowering


def test_a_small_whole_power_is_multiplications_inside_the_context_any_other_stays_tvms():
    """GPT-2's tanh GELU cubes its input: ``llvm.pow`` made a libm ``powf`` call per lane (5.7 ms
    against 0.29 ms for its 128 x 3072 GELU, Rocket Lake). 2.5 is no whole power: TVM's call."""
    from tvm import te

    x = np.random.default_rng(0).uniform(-5, 5, 4096).astype("float32")
    with fast_exp():
        cube = _exp_kernel(op=lambda v: te.power(v, 3.0))
        other = _exp_kernel(op=lambda v: te.power(te.abs(v), 2.5))
    np.testing.assert_allclose(_run(cube, x), x.astype("float64") ** 3, rtol=1e-6, atol=1e-6)
    assert _libm_calls(cube, "pow") == 0
    np.testing.assert_allclose(_run(other, x), np.abs(x).astype("float64") ** 2.5, rtol=1e-5)
    assert _libm_calls(other, "pow") > 0


@pytest.mark.slow
def test_a_whole_model_with_a_silu_builds_right_with_and_without_it():
    import torch

    from collectors.compile import check_against_torch, compile_model
    from collectors.tasks import import_relax

    module = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.SiLU(), torch.nn.Linear(128, 8), torch.nn.Softmax(-1))
    example = (torch.randn(4, 64),)
    mod = import_relax(module.eval(), example)
    for fast in (True, False):
        err, ok = check_against_torch(compile_model(mod, fast_exp=fast), module, example)
        assert ok, (fast, err)
