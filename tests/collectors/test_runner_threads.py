"""Measurements of an N-core hardware key run on N threads.

TVM's thread pool reads TVM_NUM_THREADS, else OMP_NUM_THREADS (Ray sets it to 1 in its
workers), else half the cores on x86: a ``cpu-znver4-2c`` record measured by a plain runner
worker ran on one thread. The tuner's runner initializer pins the pool to the key's cores.
"""
from __future__ import annotations

import os

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("omp", [None, "1"])
def test_runner_worker_uses_the_hardware_cores(cpu_hw, omp, monkeypatch):
    from tvm.runtime import num_threads
    from tvm.support.popen_pool import PopenPoolExecutor

    from collectors.tuner import runner_initializer

    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)  # as in a Ray worker
    if cpu_hw.cores < 2:
        pytest.skip("one core: every thread count is right")
    pool = PopenPoolExecutor(max_workers=1, initializer=runner_initializer(cpu_hw))
    try:
        assert pool.submit(num_threads).result() == cpu_hw.cores
    finally:
        pool.shutdown()
    assert "TVM_NUM_THREADS" not in os.environ, "the tuning process's own environment is left alone"


@pytest.mark.slow
def test_the_runner_worker_is_replaced_after_max_uses(monkeypatch):
    """A runner worker lives across batches and tasks, so its memory is bounded by replacing it
    every ``MAX_USES`` measurements (one that measured ~1,500 heavy candidates held 7.6 GB)."""
    from collectors import runner

    monkeypatch.setattr(runner, "MAX_USES", 2)
    pool = runner._start_worker(30.0, None)
    try:
        pids = [pool.submit(os.getpid).result() for _ in range(4)]
    finally:
        pool.shutdown()
    assert pids[0] == pids[1] != pids[2] == pids[3]


#: run in a fresh process: a tiny Relax model run as the demo and ``tlm compile`` run theirs, then
#: the number of threads TVM's pool runs
_RUN_A_MODEL = """
import numpy as np
from tvm import relax
from tvm.runtime import num_threads
from collectors.compile import compile_model, run_model
from collectors.hardware import detect_hardware

bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType((4,), "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        y = bb.emit_output(relax.op.add(x, x))
    bb.emit_func_output(y)
hw = detect_hardware()
run_model(compile_model(bb.get(), hw), [np.ones(4, "float32")], hw)
print("threads", num_threads())
"""


@pytest.mark.slow
def test_a_whole_model_runs_on_the_hardware_cores(cpu_hw):
    """A compiled model run (or timed) in a plain process uses the key's cores, as its tasks were
    measured: TVM's default pool took one thread on a 2-core Zen 3 and a parallel region then
    cost ~9 us instead of ~1.5 us, so the demo's small BERT ran 0.109 ms from served schedules
    against 0.046 ms with the key's two threads."""
    import subprocess
    import sys

    if cpu_hw.cores < 2:
        pytest.skip("one core: every thread count is right")
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", _RUN_A_MODEL], env=env, capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert out.split()[-2:] == ["threads", str(cpu_hw.cores)]
