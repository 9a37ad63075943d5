"""Suite-wide settings and fixtures. Area fixtures live in tests/<area>/conftest.py, helpers
shared by any test in tests/helpers/.

Ray's token auth and usage stats are off for local test clusters, and the slow CUDA
tensor-intrinsic import (~16 s per process) is avoided by the collectors' own fix, installed by
a session fixture (not at import time): CUDA spaces load their intrinsics into it on demand.

Hardware, never mixed up:
- ``cpu_hw`` is this host (detected): programs built for it are run and checked for the right
  answer;
- ``znver4_hw`` is a fixed AMD Zen 4 target: tests that mean fixed prompt words or records
  measured on Zen 4 use it, say so in their name, and only encode, decode and lower for it
  (running it could be an illegal instruction on another CPU);
- ``cuda_hw`` is an H100-like GPU target, for encoding, lowering and verifying CUDA programs
  without a GPU (tests that run one are marked ``gpu``).

Markers: ``slow`` (still run by the README's test command and CI; ``-m "not slow"`` is the
quick loop), ``postgres``, ``gpu``, and ``timing``: a comparison of timings that needs a quiet
machine, run only with ``--timing``.
"""
import os

import pytest

from tests.helpers.corpora import znver4

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _light_tensor_intrinsics():
    """CPU sketches need only the x86 tensor intrinsics (FACTS: ~16 s saved per process)."""
    import collectors.fast_import as fast_import

    fast_import.install()


def pytest_addoption(parser):
    parser.addoption("--timing", action="store_true", default=False,
                     help="also run the tests marked timing (they compare timings: a quiet machine only)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--timing"):
        return
    skip = pytest.mark.skip(reason="compares timings: run on a quiet machine with --timing")
    for item in items:
        if "timing" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cpu_hw():
    """This host's CPU: what tests run and measure on."""
    from collectors.hardware import detect_hardware

    return detect_hardware("cpu")


@pytest.fixture(scope="session")
def small_zoo_tasks(cpu_hw):
    """``{model: its tasks}`` of the six zoo models' small variants, extracted once per run (~20 s)."""
    from collectors.tasks import extract_tasks
    from collectors.zoo import MODEL_NAMES

    return {m: extract_tasks(m, cpu_hw, small=True) for m in MODEL_NAMES}


@pytest.fixture(scope="session")
def znver4_hw():
    """A fixed 2-core AMD Zen 4 (AVX-512) target: for encoding, decoding and lowering only."""
    return znver4()


@pytest.fixture(scope="session")
def cuda_hw():
    """An H100-like CUDA target (no GPU needed to encode, lower and verify for it)."""
    from collectors.hardware import Hardware

    return Hardware(key="cuda-sm_90-test", kind="cuda", arch="sm_90", cores=132, vector_bits=1024,
                    target={"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                            "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                            "host": {"kind": "llvm"}},
                    description="test H100-like GPU")
