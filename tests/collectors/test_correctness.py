"""The correctness reference (collectors/correctness.py): the unscheduled program's values, made fast
enough for a large task. LLaMA-7B's LM head (128 x 4096 -> 32,000) took 192 s a reference, paid by
every measurement call of `tlm compile --time-budget 120` (410 s spent measuring 4 programs)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import workloads as w

WORKLOADS = {
    "matmul": lambda: w.matmul(48, 80, 96),
    "matmul, B transposed": lambda: w.matmul(48, 80, 96, transpose_b=True),
    "batched matmul": lambda: w.batch_matmul(3, 16, 40, 24),
    "matmul + relu": lambda: w.matmul_relu_mod(24, 40, 56),
    "convolution + relu": lambda: w.conv_mod(8, 14, 16),
    "1x1 convolution": lambda: w.pointwise_conv_mod(24, 7, 16),
    "depthwise convolution": lambda: w.depthwise_conv_mod(8, 16, 5, 2),
    "softmax": lambda: w.softmax_mod(8, 100),
}


@pytest.mark.parametrize("kind", list(WORKLOADS))
def test_the_reference_holds_the_plain_loops_values_bit_for_bit(kind):
    """However its loops are ordered and split over the cores, every output element is reduced in
    the order of the unscheduled program's own loops: the values are the same bits."""
    import tvm

    from collectors.correctness import make_reference, param_specs, random_inputs

    mod = WORKLOADS[kind]()
    ref = make_reference(mod, seed=3)
    inputs = random_inputs(param_specs(mod), seed=3)
    args = [tvm.runtime.tensor(a) for a in inputs]
    tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))["main"](*args)
    for got, plain in zip(ref.outputs, args):
        assert np.array_equal(got, plain.numpy())


def test_a_matmuls_reference_sums_over_k_outside_its_stride_1_axis():
    """The unscheduled matmul's innermost loop is k, which strides B by a row per step (the LM head:
    4096 rows of 128 KB); the reference walks the output's stride-1 axis innermost instead, B and C
    read along their rows, the rows split over the cores. B transposed is read along k already: kept."""
    from tvm.s_tir.schedule import Schedule

    from collectors.correctness import reference_program

    def loops(mod):
        sch = Schedule(reference_program(mod))
        block = sch.get_child_blocks(sch.get_sblock("root"))[0]
        return [sch.get(loop) for loop in sch.get_loops(block)]

    nn = loops(w.matmul(48, 80, 96))
    assert [int(x.extent) for x in nn] == [48, 96, 80] and int(nn[0].kind) == 1  # ForKind.PARALLEL
    nt = loops(w.matmul(48, 80, 96, transpose_b=True))
    assert [int(x.extent) for x in nt] == [48, 80, 96]
