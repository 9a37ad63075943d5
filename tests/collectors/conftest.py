"""Fixtures of the collectors tests: a small TE workload and a real MetaSchedule database
(``cpu_hw``, this machine's CPU, is suite-wide: tests/conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def matmul_mod():
    from tests.helpers.workloads import matmul

    return matmul()


def _relax_matmul():
    """A Relax module with one 64x64x64 matmul, fused by the "zero" pipeline (one task)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64, 64), "float32"))
    w = relax.Var("w", relax.TensorType((64, 64), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
        bb.emit_func_output(out)
    return relax.get_pipeline("zero")(bb.get())


@pytest.fixture(scope="session")
def ms_database(request):
    """A real MetaSchedule JSON database: 8 trials of a 64x64x64 matmul on this CPU.

    Tuned once (about 40 s) and cached in pytest's cache dir, keyed by TVM version and CPU.
    Returns (work_dir, relax module, target dict, list of task modules).
    """
    import fcntl
    import shutil

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from collectors import fast_import  # the ~16 s tensor-intrinsic import trap, avoided on CPU

    cpu = tvm.target.codegen.llvm_get_system_cpu()
    target = {"kind": "llvm", "mcpu": cpu, "num-cores": 2}
    mod = _relax_matmul()
    tasks = [t.dispatched[0] for t in ms.relax_integration.extract_tasks(mod, tvm.target.Target(target))]
    cache = request.config.cache.mkdir(f"tlm-storage-msdb-{tvm.__version__}-{cpu}")
    done = cache / "DONE"
    # the xdist workers share pytest's cache dir: one tunes, the other waits for it (both tuning
    # into one work dir gave a database of 16 records where the tests expect 8)
    with open(cache.parent / f"{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir(parents=True)
            ms.relax_integration.tune_relax(
                mod, params={}, target=tvm.target.Target(target), work_dir=str(cache), max_trials_global=8,
                num_trials_per_iter=8, builder=ms.builder.LocalBuilder(initializer=fast_import.install),
            )
            done.write_text("ok\n")
    return cache, mod, target, tasks
