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
quick loop), ``postgres``, ``gpu``, ``ray`` (starts Ray), and ``timing``: a
comparison of timings that needs a quiet machine, run only with ``--timing -n 0``.

Two xdist workers (``-n 2 --dist loadscope`` in pyproject.toml: the suite's wall time on 2 cores
is half TVM compiles and half Ray start-ups and waits, which overlap well), dealt the tests
longest first by their recorded durations (tests/helpers/schedule.py); ``-n 0`` runs in one
process.
"""
import json
import os

import pytest

from tests.helpers.corpora import znver4

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the two xdist workers measure side by side and no test's timing means anything: record each
# candidate's host load, never redo or refuse (tests/collectors/test_host_load.py sets the policy)
os.environ.setdefault("TLM_BUSY_HOST", "record")


@pytest.fixture(scope="session", autouse=True)
def _light_tensor_intrinsics():
    """CPU sketches need only the x86 tensor intrinsics (FACTS: ~16 s saved per process)."""
    import collectors.fast_import as fast_import

    fast_import.install()


def pytest_addoption(parser):
    parser.addoption("--timing", action="store_true", default=False,
                     help="also run the tests marked timing (they compare timings: a quiet machine only)")
    parser.addoption("--store-durations", action="store_true", default=False,
                     help="after a passing run, record its tests' durations in tests/durations.json, over "
                          "the earlier record (the order the workers get them in)")


HERE = os.path.dirname(os.path.abspath(__file__))
_durations: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` deals tests longest first (tests/helpers/schedule.py says why)."""
    if config.getvalue("dist") == "loadscope":
        from tests.helpers.schedule import LongestFirst

        return LongestFirst(config, log)
    return None


def pytest_collection_modifyitems(config, items):
    if config.getoption("--timing"):
        return
    skip = pytest.mark.skip(reason="compares timings: run on a quiet machine with --timing")
    for item in items:
        if "timing" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """Sum each test's setup, call and teardown (the controller sees every worker's reports)."""
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if config.getoption("--store-durations") and not hasattr(config, "workerinput") and exitstatus == 0:
        from tests.helpers.schedule import store_durations

        store_durations(_durations)


@pytest.fixture
def fault_row(request):
    """``fault_row(fault, where, outcome, lost, duplicated)``: one row of the fault table
    (``bench/reliability.py``): written to ``$TLM_FAULT_TABLE`` (JSON lines) when it is set."""
    rows: list[dict] = []

    def record(fault: str, where: str, outcome: str, lost: int, duplicated: int) -> None:
        rows.append({"fault": fault, "where": where, "outcome": outcome, "lost": int(lost),
                     "duplicated": int(duplicated), "test": request.node.nodeid})

    yield record
    path = os.environ.get("TLM_FAULT_TABLE")
    if path and rows:
        with open(path, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


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

