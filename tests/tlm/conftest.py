"""Fixtures of the tensor-language tests: small TE workloads as Tasks, CPU and CUDA hardware.

The workloads (tests/tlm/helpers.py) cover what CPU sketches sample: multi-level tiling
(matmul, conv2d: perfect tiles, unroll categorical, parallel annotation) and fused reductions
(softmax: compute locations).

Two kinds of CPU hardware, never mixed up:
- ``cpu_hw`` is this host (detected), as everywhere in the suite: programs built for it are run
  and checked for the right answer;
- ``znver4_hw`` is a fixed AMD Zen 4 target: tests that mean fixed prompt words or records
  measured on Zen 4 use it, say so in their name, and only encode, decode and lower for it
  (running it could be an illegal instruction on another CPU).
"""
from __future__ import annotations

import pytest

from tests.tlm.helpers import conv_mod, make_task, matmul_relu_mod, softmax_mod


@pytest.fixture(scope="session")
def cpu_hw():
    """This host's CPU: what tests run and measure on."""
    from collectors.hardware import detect_hardware

    return detect_hardware("cpu")


@pytest.fixture(scope="session")
def znver4_hw():
    """A fixed 2-core AMD Zen 4 (AVX-512) target: for encoding, decoding and lowering only."""
    from collectors.hardware import hardware_from_index

    return hardware_from_index("cpu-znver4-2c", {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, "test CPU")


@pytest.fixture(scope="session")
def cuda_hw():
    from collectors.hardware import Hardware

    return Hardware(key="cuda-sm_90-test", kind="cuda", arch="sm_90", cores=132, vector_bits=1024,
                    target={"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                            "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                            "host": {"kind": "llvm"}},
                    description="test H100-like GPU")


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
