"""Tune one task with MetaSchedule and turn every measured candidate into a corpus record.

``tune_task`` runs MetaSchedule's own machinery (TuneContext, search strategy and cost model,
task scheduler, MemoryDatabase, the default measure callbacks) for one task and a budget of
trials, with our builder and runner plugged into its extension points: a build pool that
outlives the batch and links each candidate in parallel (collectors/builder.py), and a runner
whose warm worker times every candidate and then checks the buffers it timed against the
unscheduled program (collectors/runner.py): a wrong answer becomes an error, never a latency. One measure
callback of ours sees every (candidate, build result, run result) as it is measured and hands
the batch to ``on_records`` right away, so a caller can flush records per batch (crash
safety). MetaSchedule's work dir is a temp dir. It never starts Ray and prints nothing:
progress goes to an optional callback, and MetaSchedule's own logs to a file in the work dir.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from collectors.builder import make_pool_builder
from collectors.correctness import error_from_runner, make_reference
from collectors.fast_import import install, install_for_target
from collectors.hardware import Hardware, check_runs_here
from collectors.host_load import measuring_job
from collectors.ms_database import commit_records
from collectors.runner import host_load_of, make_checked_runner
from collectors.sketches import sketch_id, tune_context
from collectors.tasks import Task
from collectors.threads import pin_tvm_threads
from collectors.tir import as_module, plain_json, trace_json, trace_text, tvm_version
from collectors.unmeasured_search import unmeasured_only
from storage import Record, make_record_id

logger = logging.getLogger(__name__)

STRATEGIES = ("evolutionary", "replay-trace")

#: ``on_records(records)``: called once per measured batch with the batch's Records.
RecordsCallback = Callable[[list[Record]], None]
#: ``progress(trials_done, trials_total, best_latency_s_or_None)`` after each batch.
ProgressCallback = Callable[[int, int, "float | None"], None]


@dataclass
class TuneConfig:
    """How to tune one task. Stored (as ``tuner_params``) with every record it produces."""

    trials: int = 64  # measured candidates in total (MetaSchedule's max_trials_global)
    strategy: str = "evolutionary"  # "evolutionary" (xgb cost model) or "replay-trace" (random valid samples)
    seed: int = 0  # forked into MetaSchedule's rand_state as ms.tune_tir does
    trials_per_iter: int = 64  # candidates built and measured per batch (one on_records call per batch)
    cost_model: str | None = None  # None: "xgb" for evolutionary, "random" for replay-trace
    builder_workers: int | None = None  # parallel build processes; None: the hardware's core count
    build_timeout_s: float = 30.0  # a candidate whose build takes longer is an error
    run_timeout_s: float = 30.0  # a candidate whose run takes longer is an error
    number: int = 3  # evaluator: runs per measurement (MetaSchedule's default)
    repeat: int = 1  # evaluator: measurements per candidate; run_secs has repeat entries
    # evaluator: minimum time of one measurement (MetaSchedule: 100). On a 1.4 ms conv2d the spread
    # is this machine's noise for 1..100 ms (p10-p90 1.0-4.6%, bench/results/collect.json,
    # min_repeat_ms_spread); 20 keeps a margin for fast kernels at a quarter of the cost.
    min_repeat_ms: int = 20
    check_correctness: bool = True  # check each measured candidate against the unscheduled program
    work_dir: str | None = None  # MetaSchedule's work dir (logs); None: a temp dir removed afterwards
    # the name records and units are stored under; "" = the strategy. A tuner other than
    # MetaSchedule's (the TLM's closed loop, "tlm:<model id>") names itself here and is run by a
    # ``tune`` function of its own (collectors.collect's ``tune=``).
    tuner: str = ""

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES and not self.tuner:
            raise ValueError(f"strategy {self.strategy!r} is not one of {STRATEGIES}")
        if self.trials < 1:
            raise ValueError(f"trials must be >= 1, got {self.trials}")
        if self.trials_per_iter < 1:
            raise ValueError(f"trials_per_iter must be >= 1, got {self.trials_per_iter}")

    @property
    def tuner_name(self) -> str:
        """What records and units are stored under: ``tuner``, else the strategy."""
        return self.tuner or self.strategy

    @property
    def resolved_cost_model(self) -> str:
        if self.cost_model:
            return self.cost_model
        if self.strategy not in STRATEGIES:
            return "none"  # another tuner's own (e.g. the TLM's likelihood)
        return "xgb" if self.strategy == "evolutionary" else "random"

    def params(self) -> dict[str, Any]:
        """The tuner parameters that shape the records (the ``tuner_params`` JSON)."""
        p = {k: v for k, v in asdict(self).items() if k not in ("work_dir", "builder_workers", "strategy", "tuner")}
        p["cost_model"] = self.resolved_cost_model
        return p


@dataclass
class TuneSummary:
    """What one ``tune_task`` call did."""

    workload_key: str
    task_name: str
    hardware_key: str
    tuner: str
    trials: int  # trials asked for
    records: int = 0  # candidates measured (records handed to on_records)
    errors: int = 0  # of which failed (build, run or wrong answer)
    wrong_answers: int = 0  # of which were wrong answers
    best_latency_s: float | None = None
    best_trace_json: str | None = None
    sketches: int = 0  # size of the design space
    elapsed_s: float = 0.0
    error_kinds: dict[str, int] = field(default_factory=dict)


def _init_runner_worker(cores: int | None, light_intrinsics: bool) -> None:
    if cores:
        pin_tvm_threads(cores)
    if light_intrinsics:
        install()


def runner_initializer(hardware: Hardware) -> Callable[[], None]:
    """The initializer of a runner worker process measuring on ``hardware``.

    On a CPU it pins TVM's thread pool to the key's core count (:func:`pin_tvm_threads`) and
    installs the light tensor intrinsics. Set only in the worker, so the tuning process's own
    environment is left alone.
    """
    is_cpu = hardware.kind == "cpu"
    return _runner_initializer(hardware.cores if is_cpu else None, is_cpu)


@functools.lru_cache(maxsize=None)
def _runner_initializer(cores: int | None, light_intrinsics: bool) -> Callable[[], None]:
    # One object per setting: the runner's worker is shared by runners with the same initializer.
    return functools.partial(_init_runner_worker, cores, light_intrinsics)


def tune_task(task: Task, hardware: Hardware, config: TuneConfig | None = None, *,
              on_records: RecordsCallback | None = None, progress: ProgressCallback | None = None,
              run_id: str = "", cost_model: Any = None, seed_records: list[Record] | None = None) -> TuneSummary:
    """Tune ``task`` on ``hardware`` (this machine) and emit a record per measured candidate.

    ``cost_model``: a cost model object instead of a fresh ``config.cost_model`` (a corpus-trained
    ``CostModel.search_model()``); ``seed_records``: measured records of the task put in the
    search's database first, where its first population's measured part comes from. Raises
    ``NotRunnableHere`` before anything is built when this host cannot run ``hardware``'s code.
    """
    config = config or TuneConfig()
    check_runs_here(hardware)
    t0 = time.perf_counter()
    target = hardware.tvm_target()
    install_for_target(target)
    from tvm.s_tir import meta_schedule as ms

    mod = as_module(task.mod)
    summary = TuneSummary(task.workload_key, task.task_name, hardware.key, config.strategy, config.trials)
    own_dir = config.work_dir is None
    work_dir = tempfile.mkdtemp(prefix="tlm-tune-") if own_dir else config.work_dir
    os.makedirs(work_dir, exist_ok=True)
    with measuring_job(f"tuning {task.task_name} ({config.tuner_name}, {config.trials} trials)"):
        ms_logger, handler = _file_logger(work_dir, task.task_name)
        try:
            # Profiler sections of our own, beside MetaSchedule's (bench/collect.py reads them).
            with ms.Profiler.timeit("tlm/DesignSpace"):
                ctx = tune_context(mod, target, seed=config.seed, task_name=task.task_name, num_threads=hardware.cores)
                sketches = list(ctx.generate_design_space())
            summary.sketches = len(sketches)
            # Seeded as ms.tune_tir seeds its single task (MetaSchedule itself is not run-to-run
            # deterministic with several threads: same seed, similar but not identical candidates).
            rand_state = ms.utils.fork_seed(config.seed, n=1)[0]
            ctx = ms.TuneContext(
                mod=mod, target=target, space_generator="post-order-apply",
                search_strategy=unmeasured_only(config.strategy, seed_records) if seed_records else config.strategy,
                task_name=task.task_name, rand_state=rand_state,
                num_threads=hardware.cores, logger=ms_logger,
            ).clone()
            builder, runner, base = _measurement(task, hardware, config, work_dir, run_id)
            emit = functools.partial(_emit_batch, base, sketches, summary, on_records, progress, config.trials)
            recorder = _make_recorder(emit)
            if not any(len(sk.trace.decisions) for sk in sketches):
                # Nothing to search: the sketches are the whole space. MetaSchedule's search would
                # retry its population for ~20 s to find the one program again (elementwise tasks).
                from collectors.sketches import refusing_postproc

                schedules = [sch for sch in (sk.copy() for sk in sketches) if refusing_postproc(sch, task, hardware) is None]
                _measure(schedules, hardware, builder, runner, emit)
            else:
                database = ms.database.MemoryDatabase()
                commit_records(database, mod, target, seed_records or [])
                with _InterruptGuard() as guard:
                    guard.run(
                        ms.tune.tune_tasks,
                        tasks=[ctx], task_weights=[1.0], work_dir=work_dir,
                        max_trials_global=config.trials, max_trials_per_task=config.trials,
                        num_trials_per_iter=min(config.trials_per_iter, config.trials),
                        builder=builder, runner=runner, database=database,
                        cost_model=cost_model if cost_model is not None else config.resolved_cost_model,
                        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), recorder],
                        task_scheduler="gradient",
                    )
            if recorder.pending_exc is not None:  # an exception in on_records (e.g. Ctrl-C)
                raise recorder.pending_exc
        finally:
            ms_logger.removeHandler(handler)
            handler.close()
            if own_dir:
                shutil.rmtree(work_dir, ignore_errors=True)
    summary.elapsed_s = time.perf_counter() - t0
    logger.debug("tuned %s on %s: %d records, best %s s", task.task_name, hardware.key,
                 summary.records, summary.best_latency_s)
    return summary


def _measurement(task: Task, hardware: Hardware, config: TuneConfig, work_dir: str, run_id: str,
                 tuner: str | None = None) -> tuple[Any, Any, dict]:
    """``(builder, runner, record base)`` of one task's measurements: the reference outputs every
    candidate is checked against, the pool builder and the checked runner, and the columns
    every record of the task shares."""
    from tvm.s_tir import meta_schedule as ms

    is_cpu = hardware.kind == "cpu"
    mod = as_module(task.mod)
    evaluator = ms.runner.EvaluatorConfig(
        number=config.number, repeat=config.repeat, min_repeat_ms=config.min_repeat_ms,
        enable_cpu_cache_flush=False,
    )
    reference_path = None
    params = config.params()
    if config.check_correctness:
        try:
            with ms.Profiler.timeit("tlm/Reference"):
                reference_path = make_reference(mod, seed=config.seed,
                                                path=os.path.join(work_dir, "reference.npz")).path
        except Exception as exc:  # noqa: BLE001 - e.g. a dtype numpy cannot hold
            # Measure anyway, but say so in every record: these latencies are unchecked.
            logger.warning("no reference for %s (%s): its records are not checked", task.task_name, exc)
            params["check_correctness"] = False
            params["correctness_unavailable"] = f"{type(exc).__name__}: {exc}"[:200]
    builder = make_pool_builder(max_workers=config.builder_workers or hardware.cores,
                                timeout_s=config.build_timeout_s, initializer=install if is_cpu else None)
    runner = make_checked_runner(evaluator_config=evaluator, reference_path=reference_path,
                                 timeout_s=config.run_timeout_s, initializer=runner_initializer(hardware))
    base = {
        "workload_key": task.workload_key, "hardware_key": hardware.key,
        "target": json.dumps(hardware.target, sort_keys=True), "task_name": task.task_name,
        "tuner": tuner or config.tuner_name, "tuner_params": json.dumps(params, sort_keys=True),
        "run_id": run_id, "node": socket.gethostname(), "tvm_version": tvm_version(),
    }
    return builder, runner, base


def measure_schedules(task: Task, hardware: Hardware, schedules: list, *, tuner: str,
                      config: TuneConfig | None = None, on_records: RecordsCallback | None = None,
                      run_id: str = "") -> TuneSummary:
    """Build, run and check given (postprocessed) schedules of ``task`` like a tuner's candidates,
    recorded under ``tuner`` (e.g. ``tlm:<model id>``): the same builder, runner, reference and
    record rules as :func:`tune_task`, so a generated schedule's latency compares with a searched one's."""
    config = config or TuneConfig(trials=max(1, len(schedules)))
    check_runs_here(hardware)
    target = hardware.tvm_target()
    install_for_target(target)
    t0 = time.perf_counter()
    summary = TuneSummary(task.workload_key, task.task_name, hardware.key, tuner, len(schedules))
    with measuring_job(f"measuring {len(schedules)} schedules of {task.task_name} ({tuner})"):
        work_dir = tempfile.mkdtemp(prefix="tlm-measure-")
        try:
            ctx = tune_context(as_module(task.mod), target, seed=config.seed, task_name=task.task_name,
                               num_threads=hardware.cores)
            sketches = list(ctx.generate_design_space())
            summary.sketches = len(sketches)
            builder, runner, base = _measurement(task, hardware, config, work_dir, run_id, tuner=tuner)
            emit = functools.partial(_emit_batch, base, sketches, summary, on_records, None, len(schedules))
            if schedules:
                _measure(schedules, hardware, builder, runner, emit)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
    summary.elapsed_s = time.perf_counter() - t0
    return summary


def _measure(schedules: list, hardware: Hardware, builder: Any, runner: Any, emit: Callable[..., None]) -> None:
    """Build, run and record postprocessed schedules through the builder, runner and recorder
    of a search (one batch)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput, RunnerResult
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate
    from tvm.s_tir.meta_schedule.utils import remove_build_dir

    cands = [MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)) for sch in schedules]
    builds = builder.build([BuilderInput(c.sch.mod, hardware.tvm_target()) for c in cands])
    device = "cuda" if hardware.kind == "cuda" else "cpu"
    ok = [(c, b) for c, b in zip(cands, builds) if b.error_msg is None]
    ran = iter(runner.run([RunnerInput(b.artifact_path, device, c.args_info) for c, b in ok]))
    runs = [next(ran).result() if b.error_msg is None else RunnerResult(None, "not run: build failed") for b in builds]
    emit(cands, builds, runs)
    for b in builds:
        if b.artifact_path:
            remove_build_dir(b.artifact_path)


class _InterruptGuard:
    """Keeps Ctrl-C a KeyboardInterrupt across MetaSchedule's C++ loop.

    A KeyboardInterrupt raised in Python code that C++ called (builder, runner, callbacks)
    comes back out of ``tune_tasks`` as a bare RuntimeError, which would look like a failed
    task. While tuning, SIGINT is noted (main thread only); any error after one is re-raised
    as KeyboardInterrupt.
    """

    def __init__(self) -> None:
        self.interrupted = False
        self._previous = None

    def __enter__(self) -> "_InterruptGuard":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)

            def handler(signum, frame):
                self.interrupted = True
                if callable(previous):
                    previous(signum, frame)
                else:
                    raise KeyboardInterrupt

            self._previous = previous
            signal.signal(signal.SIGINT, handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            import signal

            signal.signal(signal.SIGINT, self._previous)

    def run(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if self.interrupted:
                raise KeyboardInterrupt from exc
            raise


def _emit_batch(base, sketches, summary, on_records, progress, total, measure_candidates, builder_results,
                runner_results) -> None:
    """One measured batch: its Records, the summary, ``on_records`` and ``progress``."""
    records = [_record(base, sketches, cand, b, r)
               for cand, b, r in zip(measure_candidates, builder_results, runner_results)]
    _update_summary(summary, records)
    if on_records is not None:
        on_records(records)
    if progress is not None:
        progress(summary.records, total, summary.best_latency_s)


def _make_recorder(emit: Callable[..., None]):
    """The measure callback that hands every batch MetaSchedule measured to ``emit``."""
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
    from tvm.ir.utils import derived_object

    @derived_object
    class _Recorder(PyMeasureCallback):
        """Turns each measured batch into records and hands them over at once."""

        def __init__(self) -> None:
            self.pending_exc: BaseException | None = None

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results) -> None:
            if self.pending_exc is not None:
                return
            try:
                emit(measure_candidates, builder_results, runner_results)
            except BaseException as exc:  # noqa: BLE001 - re-raised after MetaSchedule returns
                # An exception cannot cross the C++ callback boundary cleanly: remember it, and
                # stop the scheduler from asking for more by exhausting the task.
                self.pending_exc = exc
                try:
                    task_scheduler.terminate_task(task_id)
                except Exception:  # noqa: BLE001
                    pass

    return _Recorder()


def _record(base: dict, sketches: list, cand: Any, b: Any, r: Any) -> Record:
    """The Record of one measured candidate: a build error, a run error or wrong answer, or
    its timings (never both)."""
    tj = trace_json(cand.sch.trace)
    trace_str = trace_text(tj)
    run_secs: list[float] = []
    error = None
    if b.error_msg:
        error = "build error: " + str(b.error_msg).strip()
    elif r.error_msg:
        error = error_from_runner(r.error_msg)
        if error and not error.startswith("wrong answer"):
            error = "run error: " + error
    elif r.run_secs is None:
        error = "run error: no timings"
    else:
        run_secs = [float(plain_json(x)) for x in r.run_secs]
    return Record(
        **base,
        record_id=make_record_id(base["workload_key"], base["hardware_key"], trace_str),
        sketch_id=sketch_id(tj, sketches),
        trace_json=trace_str,
        decisions_json=json.dumps(tj[1], separators=(",", ":")),
        run_secs=run_secs,
        latency_s=float(statistics.median(run_secs)) if run_secs and error is None else None,
        error=error,
        args_info_json=json.dumps([plain_json(a.as_json()) for a in cand.args_info], separators=(",", ":")),
        host_load=host_load_of(b.artifact_path) if b.artifact_path else None,
    )


def _update_summary(summary: TuneSummary, records: list[Record]) -> None:
    for rec in records:
        summary.records += 1
        if rec.error:
            summary.errors += 1
            kind = rec.error.split(":", 1)[0]
            summary.error_kinds[kind] = summary.error_kinds.get(kind, 0) + 1
            if kind == "wrong answer":
                summary.wrong_answers += 1
        elif summary.best_latency_s is None or rec.latency_s < summary.best_latency_s:
            summary.best_latency_s = rec.latency_s
            summary.best_trace_json = rec.trace_json


def _file_logger(work_dir: str, task_name: str) -> tuple[logging.Logger, logging.Handler]:
    """MetaSchedule's per-task log goes to a file, not the console (the caller owns that)."""
    log = logging.getLogger(f"{__name__}.ms.{task_name}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    handler = logging.FileHandler(os.path.join(work_dir, f"{task_name[:100]}.log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    return log, handler
