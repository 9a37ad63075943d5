"""Suite-wide settings. Area fixtures live in tests/<area>/conftest.py, helpers in
tests/<area>/helpers.py.

Ray's token auth and usage stats are off for local test clusters (FACTS-tvm-ray.md), and
the slow CUDA tensor-intrinsic import is avoided by the collectors' own fix, installed by a
session fixture (not at import time): CUDA spaces load their intrinsics into it on demand.
"""
import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _light_tensor_intrinsics():
    """CPU sketches need only the x86 tensor intrinsics (FACTS: ~16 s saved per process)."""
    import collectors.fast_import as fast_import

    fast_import.install()
