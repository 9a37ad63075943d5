"""The pool builder and the checked runner: MetaSchedule's latencies, every failure as data,
no worker left behind."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collectors.builder import make_pool_builder
from collectors.runner import make_checked_runner

EVAL = dict(number=3, repeat=1, min_repeat_ms=20, enable_cpu_cache_flush=False)


def _extern_mod(fn: str, *args):
    """A 4-element kernel that calls C function ``fn`` (abort: a crash; sleep: a hang)."""
    import tvm
    from tvm import te

    a = te.placeholder((4,), name="A")
    c = te.compute((4,), lambda i: a[i] + tvm.tirx.call_extern("int32", fn, *args).astype("float32"), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, c])})


def _tuned_schedule(mod, hw):
    """A parallel, vectorised program of ``mod`` (the sketch with the fastest of a few samples is
    not needed: any valid, non-trivial program compares the two paths)."""
    from tvm.s_tir.schedule import Schedule, Trace

    from collectors.sketches import design_space, refusing_postproc
    from collectors.tasks import Task
    from collectors.tir import workload_key

    task = Task(workload_key(mod), "mm", mod)
    for seed in range(1, 50):
        sch = Schedule(mod, seed=seed)
        Trace(design_space(mod, hw)[0].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if refusing_postproc(sch, task, hw) is None:
            return sch.mod
    raise AssertionError("no valid sample")


def _inputs(ms, mods, target):
    return [ms.builder.BuilderInput(m, target) for m in mods]


def _run(ms, runner, artifact, mod):
    info = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    return runner.run([ms.runner.RunnerInput(artifact, "cpu", info)])[0].result()


@pytest.mark.timing
def test_same_latency_as_metaschedules_local_builder_and_runner(cpu_hw, tmp_path):
    """One schedule, built and timed both ways, alternately, several times: the fastest timings
    agree (the fastest is the least disturbed; on this shared VM one path's median was once
    thrown off by a single 2x-slow run, in a fresh-clone run of 2026-12-01)."""
    from tvm.s_tir import meta_schedule as ms

    from collectors.correctness import make_reference
    from collectors.fast_import import install
    from collectors.tuner import runner_initializer
    from tests.helpers.workloads import matmul

    mod = _tuned_schedule(matmul(256, 256, 256), cpu_hw)
    target = cpu_hw.tvm_target()
    ref = make_reference(mod, path=str(tmp_path / "ref.npz"))
    ours_b = make_pool_builder(max_workers=cpu_hw.cores, initializer=install)
    ours_r = make_checked_runner(evaluator_config=ms.runner.EvaluatorConfig(**EVAL), reference_path=ref.path,
                                 initializer=runner_initializer(cpu_hw))
    theirs_b = ms.builder.LocalBuilder(max_workers=cpu_hw.cores, initializer=install)
    theirs_r = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(**EVAL),
                                     initializer=runner_initializer(cpu_hw))
    ours, theirs = [], []
    try:
        for _ in range(5):
            for builder, runner, out in ((ours_b, ours_r, ours), (theirs_b, theirs_r, theirs)):
                (b,) = builder.build(_inputs(ms, [mod], target))
                assert b.error_msg is None, b.error_msg
                r = _run(ms, runner, b.artifact_path, mod)
                assert r.error_msg is None, r.error_msg
                out.append(float(r.run_secs[0]))
    finally:
        theirs_r.pool.shutdown()
    ratio = min(ours) / min(theirs)
    assert 0.85 < ratio < 1.18, (ours, theirs)


@pytest.mark.slow
def test_failures_are_errors_not_latencies(cpu_hw, tmp_path):
    """A build that fails, a wrong answer, a crash and a hang each come back as the candidate's
    error; the candidates after them are measured normally."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from collectors.correctness import make_reference
    from tests.helpers.workloads import matmul

    target = cpu_hw.tvm_target()
    mm = matmul(16, 16, 16)
    builder = make_pool_builder(max_workers=2, timeout_s=20)
    good, bad_target, crash, hang = builder.build([
        ms.builder.BuilderInput(mm, target),
        ms.builder.BuilderInput(mm, tvm.target.Target({"kind": "llvm", "mtriple": "nonsense-unknown-none"})),
        ms.builder.BuilderInput(_extern_mod("abort"), target),
        ms.builder.BuilderInput(_extern_mod("sleep", 100), target),
    ])
    assert good.error_msg is None and bad_target.artifact_path is None
    assert bad_target.error_msg.startswith("PoolBuilder: an exception occurred")

    ref = make_reference(mm, path=str(tmp_path / "ref.npz"))
    ref.outputs[-1] = ref.outputs[-1] + 1.0  # what a wrong schedule's output looks like
    ref.save(str(tmp_path / "wrong.npz"))
    checked = make_checked_runner(evaluator_config=ms.runner.EvaluatorConfig(**EVAL),
                                  reference_path=str(tmp_path / "wrong.npz"), timeout_s=3)
    wrong = _run(ms, checked, good.artifact_path, mm)
    assert wrong.run_secs is None and wrong.error_msg.startswith("wrong answer: max rel err")

    unchecked = make_checked_runner(evaluator_config=ms.runner.EvaluatorConfig(**EVAL), reference_path=None,
                                    timeout_s=3)
    ext = _extern_mod("abort")
    assert _run(ms, unchecked, crash.artifact_path, ext).error_msg == "crash: the measuring process died"
    assert _run(ms, unchecked, hang.artifact_path, ext).error_msg == "timeout: killed after 3 seconds"
    after = _run(ms, unchecked, good.artifact_path, mm)  # a fresh worker measures the next one
    assert after.error_msg is None and float(after.run_secs[0]) > 0


@pytest.mark.slow
def test_no_worker_process_is_left_behind(tmp_path):
    """A process that tuned with the pool builder and checked runner leaves no child running
    once it exits (the pools are stopped at exit), and an explicit shutdown stops them at once."""
    import psutil

    from tests.helpers import subprocess_env

    code = """
import json, psutil
from collectors.hardware import detect_hardware
from collectors.tasks import Task
from collectors.tir import workload_key
from collectors.tuner import TuneConfig, tune_task
from tests.helpers.workloads import matmul
mod = matmul(32, 32, 32)
tune_task(Task(workload_key(mod), "mm32", mod), detect_hardware("cpu"),
          TuneConfig(trials=2, trials_per_iter=2, strategy="replay-trace"))
kids = [p.pid for p in psutil.Process().children(recursive=True)]
tune_task(Task(workload_key(mod), "mm32", mod), detect_hardware("cpu"),
          TuneConfig(trials=2, trials_per_iter=2, strategy="replay-trace", seed=1))
again = [p.pid for p in psutil.Process().children(recursive=True)]
print("KIDS", json.dumps({"first": kids, "again": again}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=subprocess_env())
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("KIDS ")]
    assert out.returncode == 0 and line, out.stderr[-3000:]
    kids = json.loads(line[0][5:])
    assert kids["first"], "the pools were expected to keep their workers between tasks"
    assert set(kids["again"]) == set(kids["first"]), "a second task reuses the same worker processes"
    alive = [pid for pid in kids["first"] if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert not alive, f"worker processes left running: {alive}"


@pytest.mark.slow
def test_explicit_shutdown_stops_the_workers(cpu_hw):
    import psutil
    from tvm.s_tir import meta_schedule as ms

    from collectors.builder import shutdown_builders
    from collectors.runner import shutdown_runners
    from tests.helpers.workloads import matmul

    # what earlier tests on this worker left running (a Ray, a server) is not this pool's to stop
    shutdown_builders()
    shutdown_runners()
    earlier = {p.pid for p in psutil.Process().children(recursive=True)}
    (b,) = make_pool_builder(max_workers=1).build(_inputs(ms, [matmul(8, 8, 8)], cpu_hw.tvm_target()))
    assert b.error_msg is None
    before = {p.pid for p in psutil.Process().children(recursive=True)} - earlier
    assert before
    shutdown_builders()
    shutdown_runners()
    left = [pid for pid in before if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert not left
    with pytest.raises(FileNotFoundError):  # the pool's artifacts went with it
        open(b.artifact_path)
