"""Fixtures of the tensor-language tests: the small TE workloads (tests/helpers/workloads.py)
as Tasks. The hardware fixtures (``cpu_hw``, ``znver4_hw``, ``cuda_hw``) are suite-wide
(tests/conftest.py)."""
from __future__ import annotations

import pytest

from tests.helpers.workloads import conv_mod, make_task, matmul_relu_mod, softmax_mod


@pytest.fixture(scope="session")
def tasks():
    """name -> Task for the small workloads."""
    return {
        "matmul": make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul"),
        "softmax": make_task(softmax_mod(), "fused_softmax", "reduction"),
        "conv2d": make_task(conv_mod(), "fused_conv2d_relu", "conv2d"),
        # big enough that random tiles overflow 48 KiB of shared memory (GPU tests)
        "matmul_big": make_task(matmul_relu_mod(256, 256, 512), "fused_matmul_relu_big", "matmul"),
        "conv2d_big": make_task(conv_mod(64, 28, 64), "fused_conv2d_relu_big", "conv2d"),
    }
