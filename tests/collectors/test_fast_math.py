"""The vectorized float32 exp of whole-model builds (collectors/fast_math.py): exact to a few ulp,
the special values right, no libm call per lane inside the context and TVM's lowering outside."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.fast_math import fast_exp


def _exp_kernel(n: int = 4096, lanes: int = 16):
    import tvm
    from tvm import te

    from collectors.hardware import detect_hardware

    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: te.exp(a[i]), name="B")
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


def _libm_calls(lib) -> int:
    return lib.mod.inspect_source("asm").count("expf")


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
