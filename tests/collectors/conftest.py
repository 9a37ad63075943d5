"""Fixtures of the collectors tests: small TE workloads and this machine's CPU hardware."""
from __future__ import annotations

import pytest

import collectors.fast_import as fast_import

fast_import.install()  # every collectors test runs CPU-only; saves ~16 s per process


@pytest.fixture(scope="session")
def cpu_hw():
    from collectors.hardware import detect_hardware

    return detect_hardware("cpu")


@pytest.fixture(scope="session")
def matmul_mod():
    from collectors.workloads import matmul

    return matmul()
