"""A MetaSchedule runner that checks every candidate's answer and keeps its worker warm.

Through MetaSchedule's own extension point (``PyRunner``): one worker process per runner
settings measures one candidate at a time (the device is exclusive), and lives across batches
and tasks. For each candidate it ``dlopen``s the shared library the builder linked
(collectors/builder.py), times it with MetaSchedule's own evaluator (``run_evaluator_common``,
the given ``EvaluatorConfig``) on the task's reference inputs, and then compares every buffer
the timed runs left with the reference (collectors/correctness.py): a wrong answer raises, so
its timings are never returned. Checking the buffers the timed runs wrote saves a separate
checked run, and checks what was timed. The reference is loaded once per task and kept in the
worker; the random-input allocation TVM's LocalRunner repeats per candidate is gone. A timeout or a crash (the worker
dies) is the candidate's error, and the next candidate gets a fresh worker.

Without a reference (``reference_path=None``, e.g. a dtype numpy cannot hold) candidates are
timed on MetaSchedule's random arguments, unchecked; the tuner says so in the records.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

from collectors.host_load import LoadMeter, QuietHost, redo_while_busy
from collectors.pools import PoolRegistry


#: Candidates a runner worker measures before it is replaced: bounds its memory (a worker that had
#: measured ~1,500 candidates of heavy matmuls held 7.6 GB), at the cost of reloading a reference.
MAX_USES = 256
#: References kept in a runner worker (one per task being tuned; weights can be large).
_REFERENCES_KEPT = 2
_REFERENCES: "OrderedDict[str, Any]" = OrderedDict()
#: Others' load (cores) while each measured artifact was timed, until the recorder takes it: a
#: MetaSchedule ``RunnerResult`` has no room for it, the record has (``host_load``).
_HOST_LOADS: dict[str, float | None] = {}


def host_load_of(artifact_path: str) -> float | None:
    """The host load the runner saw while timing ``artifact_path`` (taken once), else None."""
    return _HOST_LOADS.pop(str(artifact_path), None)


def _reference(path: str) -> Any:
    from collectors.correctness import Reference

    ref = _REFERENCES.get(path)
    if ref is None:
        ref = _REFERENCES[path] = Reference.load(path)
        while len(_REFERENCES) > _REFERENCES_KEPT:
            _REFERENCES.popitem(last=False)
    _REFERENCES.move_to_end(path)
    return ref


def run_one(artifact_path: str, device_type: str, evaluator: Any, reference_path: str | None,
            args_info: tuple, rtol: float, atol_scale: float) -> tuple[list[float], float | None, float]:
    """Time one built candidate and check (when a reference is given) what it computed: its run
    times in seconds, the cores other processes kept busy while it was timed, and the cores it
    ran on itself (collectors/host_load.py). Runs in the runner worker; a wrong answer raises
    ``wrong answer: ...``."""
    import tvm
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

    from collectors import layout
    from collectors.correctness import Tolerance, compare

    rt_mod = tvm.runtime.load_module(artifact_path)
    device = tvm.runtime.device(device_type, 0)
    if reference_path is None:
        from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

        args = default_alloc_argument(device, list(args_info), 1)
        meter = LoadMeter()
        costs = run_evaluator_common(rt_mod, device, evaluator, args)
        return costs, meter.other_cores(), meter.own_cores()
    ref = _reference(reference_path)
    # inputs the schedule reads in another layout are handed over rewritten, and come back so
    rewrites = layout.load(artifact_path)
    given = layout.rewrite_inputs(rewrites, ref.inputs)
    args = [tvm.runtime.tensor(a, device=device) for a in given]
    meter = LoadMeter()
    costs = run_evaluator_common(rt_mod, device, evaluator, [args])
    device.sync()
    load, own = meter.other_cores(), meter.own_cores()
    # a buffer the reference left as it was must come back as given: its rewritten copy is reused
    # (rewriting LLaMA-7B's 131M-element LM head weight takes ~2 s; it was done twice a candidate)
    same = {k for k, (i, o) in enumerate(zip(ref.inputs, ref.outputs)) if o is i}
    expected = layout.rewrite_inputs([r for r in rewrites if r.param not in same], ref.outputs)
    expected = [given[k] if k in same else e for k, e in enumerate(expected)]
    err = compare([a.numpy() for a in args], expected, Tolerance(rtol, atol_scale))
    if err is not None:
        raise RuntimeError(err)
    return costs, load, own


def _start_worker(timeout_s: float, initializer: Callable[[], None] | None) -> Any:
    from tvm.support.popen_pool import PopenPoolExecutor

    return PopenPoolExecutor(max_workers=1, timeout=timeout_s, initializer=initializer, maximum_process_uses=MAX_USES)


#: The one measurement worker per (timeout, initializer) in this process.
_WORKERS: PoolRegistry[Any] = PoolRegistry("runner", _start_worker, lambda pool: pool.shutdown(wait=True))


def shutdown_runners() -> None:
    """Stop every runner worker of this process (also done at interpreter exit)."""
    _WORKERS.shutdown()


def make_checked_runner(*, evaluator_config: Any, reference_path: str | None, timeout_s: float = 30.0,
                        initializer: Callable[[], None] | None = None, rtol: float | None = None,
                        atol_scale: float | None = None, quiet: QuietHost | None = None) -> Any:
    """A ``PyRunner`` checking each candidate against ``reference_path`` (an ``.npz`` of
    ``collectors.correctness.Reference``) and timing it with ``evaluator_config``; a candidate
    timed beside a busy host is measured again or failed as ``quiet`` says (default: this
    process's ``QuietHost.from_env()``)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.runner.local_runner import LocalRunnerFuture

    from collectors.correctness import Tolerance, error_from_runner

    tol = Tolerance()
    rtol = tol.rtol if rtol is None else rtol
    atol_scale = tol.atol_scale if atol_scale is None else atol_scale
    quiet = quiet or QuietHost.from_env()

    def measure(inp: Any) -> Any:
        """One candidate; beside a busy host, again once it is quiet."""
        args = (str(inp.artifact_path), str(inp.device_type), evaluator_config, reference_path,
                tuple(a.as_json() for a in inp.args_info), rtol, atol_scale)

        def attempt() -> tuple[Any, float | None, float | None]:
            costs, load, own = _WORKERS.get(float(timeout_s), initializer).submit(run_one, *args).result()
            _HOST_LOADS[args[0]] = load
            return costs, load, own

        try:
            costs, _load, busy = redo_while_busy(attempt, quiet)
        except TimeoutError:
            return LocalRunnerFuture(error_message=f"timeout: killed after {timeout_s} seconds")
        except ChildProcessError:
            return LocalRunnerFuture(error_message="crash: the measuring process died")
        except Exception as exc:  # noqa: BLE001 - the candidate's error, as data
            return LocalRunnerFuture(error_message=error_from_runner(str(exc)) or type(exc).__name__)
        if busy is not None:
            return LocalRunnerFuture(error_message=busy)
        return LocalRunnerFuture(res=[float(x) for x in costs], error_message=None)

    @derived_object
    class CheckedRunner(PyRunner):
        """MetaSchedule's runner protocol: one exclusive, checked measurement at a time."""

        def __init__(self) -> None:
            super().__init__()

        def run(self, runner_inputs: list) -> list:
            return [measure(inp) for inp in runner_inputs]

    return CheckedRunner()
