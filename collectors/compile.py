"""Whole-model compile and run: a fused Relax module built for a hardware, with or without a
MetaSchedule database of schedules, run and timed on this host.

One home for what the demo, ``tlm compile`` and the benchmarks do with a whole model: build it
(:func:`compile_model`), run it and unwrap its output (:func:`run_model`), time it
(:func:`time_model`, several builds in turn: :func:`time_side_by_side`), and time the PyTorch
module it came from (:func:`time_torch`) so the
comparison is made in one process with one protocol. Running refuses, before anything runs,
hardware this host cannot execute (``collectors.hardware.check_runs_here``).
"""
from __future__ import annotations

import time
from typing import Any, NamedTuple, Sequence

from collectors.hardware import Hardware, check_runs_here
from collectors.threads import run_on_cores


#: timings of each build when several are compared (:func:`time_side_by_side`; medians reported)
SIDE_BY_SIDE_RUNS = 5
#: how far ahead (x) the fastest build of :func:`time_side_by_side` must be in each of two rounds
#: to end the timing early: a gap far past the call-to-call noise of a whole-model timing here (the
#: demo's small BERT: 0.96-1.2x on the same two builds)
CLEAR_GAP = 2.0
#: how far ahead (x) the fastest build must be in a first timing of one run each to end there
PROBE_GAP = 5.0
#: a build's first run is never stopped before this (:func:`time_side_by_side`): it pays the
#: build's cold start, which a fast model's PROBE_GAP x could not absorb, and a second costs little
STOP_NOT_BEFORE_S = 1.0
#: how near a whole-model build's output must be to PyTorch's (``numpy.allclose``'s arguments)
TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}


def compile_model(mod: Any, hardware: Hardware | None = None, database: Any | None = None, *,
                  fast_exp: bool = True) -> Any:
    """A Relax executable of ``mod`` for ``hardware`` (default: plain host llvm).

    With a MetaSchedule ``database`` (e.g. ``JSONDatabase``) its schedules are applied
    (``compile_relax``); without one, TVM's default (untuned) lowering is used. ``fast_exp``:
    float32 ``exp`` lowered to vector arithmetic (:mod:`collectors.fast_math`) in every build
    alike, so served, searched and untuned builds are compared under one compiler; False: TVM's
    ``llvm.exp`` (a scalar libm call per lane).
    """
    import contextlib

    import tvm

    from collectors.fast_math import fast_exp as vector_exp

    target = hardware.tvm_target() if hardware is not None else tvm.target.Target({"kind": "llvm"})
    with vector_exp() if fast_exp else contextlib.nullcontext():
        if database is None:
            return tvm.compile(mod, target=target)
        from tvm.s_tir import meta_schedule as ms

        if has_layout_free_weights(mod):
            mod, database = prepacked(mod, hardware, database), ms.database.MemoryDatabase()
        return ms.relax_integration.compile_relax(keyed_as_compiled(database), mod, target, params=None)


def has_layout_free_weights(mod: Any) -> bool:
    """Whether a PrimFunc of the Relax module ``mod`` marks weights layout-free
    (``collectors.tasks.import_relax(..., prepack_weights=True)``)."""
    import tvm

    from collectors.layout import marks_layout_free

    return any(isinstance(f, tvm.tirx.PrimFunc) and marks_layout_free(f) for f in mod.functions.values())


def prepacked(mod: Any, hardware: Hardware | None, database: Any) -> Any:
    """``mod`` (its weights layout-free) with ``database``'s schedules applied and every weight
    they read in another layout rewritten once, at compile time: the schedules' layout rewrite
    blocks split out of the kernels (``SplitLayoutRewritePreproc``) and folded on the constant
    weights (``FoldConstant``), as TVM's ``static_shape_tuning_pipeline(cpu_weight_prepack=True)``
    does. The kernels then read each weight micro-panel contiguously (BLIS's packed B) instead
    of rows a whole matrix apart. Returns the scheduled Relax module, ready to build."""
    import tvm
    from tvm import relax

    target = hardware.tvm_target() if hardware is not None else tvm.target.Target({"kind": "llvm"})
    with target, keyed_as_compiled(database), tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential([*_applying_database(),
                                         relax.transform.SplitLayoutRewritePreproc(),
                                         relax.transform.FoldConstant(),
                                         relax.transform.DeadCodeElimination()])(mod)


def _applying_database() -> list:
    """The passes ``compile_relax`` runs before and with its database lookup (the fusion it
    repeats, then ``MetaScheduleApplyDatabase``), for whoever must see their result."""
    from tvm import relax

    return [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
            relax.transform.FuseOps(), relax.transform.FuseTIR(),
            relax.transform.MetaScheduleApplyDatabase(enable_warning=False)]


def keyed_as_compiled(database: Any) -> Any:
    """``database``'s records under the workloads ``compile_relax`` looks them up by.

    ``compile_relax`` fuses the module again and annotates every PrimFunc's ``op_pattern`` before
    it queries the database, and a workload is matched with its attributes: a task whose PrimFunc
    came out of fusion carries no ``op_pattern`` (what ``extract_tasks`` gives, what the corpus
    keys), so its record was never found and the function was built with TVM's default lowering:
    BERT-base at sequence 128 built from served schedules ran 31.4 s, as slow as the untuned
    build, where its kernels sum to ~0.24 s. Each record is kept under its workload as stored and
    under the same PrimFunc annotated as the compile will see it."""
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    keyed = ms.database.MemoryDatabase()
    for rec in database.get_all_tuning_records():
        mod = rec.workload.mod
        for m in (mod, relax.transform.AnnotateTIROpPattern()(mod)):
            keyed.commit_tuning_record(ms.database.TuningRecord(
                rec.trace, keyed.commit_workload(m), rec.run_secs, rec.target, rec.args_info))
    return keyed


def scheduled_functions(mod: Any, hardware: Hardware, database: Any) -> set[str]:
    """The PrimFuncs of ``mod`` that :func:`compile_model` builds from a record of ``database``
    (the others get TVM's default lowering): the same fusion and lookup ``compile_relax`` runs."""
    import tvm

    target = hardware.tvm_target()
    with target, keyed_as_compiled(database), tvm.transform.PassContext(opt_level=3):
        fused = tvm.transform.Sequential(_applying_database())(mod)
    return {gv.name_hint for gv, f in fused.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and f.attrs.get("tirx.is_scheduled")}


def _device(hardware: Hardware | None) -> Any:
    import tvm

    if hardware is not None:
        check_runs_here(hardware)
        if hardware.kind == "cpu":
            run_on_cores(hardware.cores)  # as its tasks were measured (collectors.threads)
    return tvm.cuda(0) if hardware is not None and hardware.kind == "cuda" else tvm.cpu(0)


def _inputs(args: Sequence[Any], dev: Any) -> list:
    import numpy as np
    import tvm

    return [tvm.runtime.tensor(np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a), device=dev)
            for a in args]


def run_model(executable: Any, args: Sequence[Any], hardware: Hardware | None = None) -> Any:
    """Run a compiled model on ``args`` (torch tensors or arrays); its output as a numpy array."""
    from tvm import relax

    dev = _device(hardware)
    out = relax.VirtualMachine(executable, dev)["main"](*_inputs(args, dev))
    while not hasattr(out, "numpy") and len(out) == 1:  # unwrap a 1-tuple
        out = out[0]
    return out.numpy()


def _loaded(executable: Any, args: Sequence[Any], hardware: Hardware | None) -> tuple[Any, Any]:
    """``(virtual machine, device)`` of a compiled model on this host, ``args`` set as its inputs
    once (what a timing runs)."""
    from tvm import relax

    dev = _device(hardware)
    vm = relax.VirtualMachine(executable, dev)
    vm.set_input("main", *_inputs(args, dev))
    return vm, dev


def time_model(executable: Any, args: Sequence[Any], hardware: Hardware | None = None, *,
               number: int = 1, repeat: int = 5, min_repeat_ms: int = 50) -> float:
    """Median seconds of one run of a compiled model (TVM's time evaluator, inputs set once).
    ``number`` 1: the evaluator raises it until a repeat lasts ``min_repeat_ms``, so a fast model
    is still run many times a repeat, and a slow one (an untuned BERT-base, seconds a run) once:
    at 10 its timing alone took over 20 minutes of ``tlm compile --model bert_base``."""
    vm, dev = _loaded(executable, args, hardware)
    timer = vm.time_evaluator("invoke_stateful", dev, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return float(timer("main").median)


class SideBySide(NamedTuple):
    """What :func:`time_side_by_side` measured: each build's median seconds, every run, and the
    builds whose figure is a lower bound (their one run was stopped, far slower than the first's)."""

    medians: dict[str, float]
    runs: dict[str, list[float]]
    at_least: frozenset[str]


def time_side_by_side(builds: dict[str, Any], args: Sequence[Any], hardware: Hardware | None = None, *,
                      runs: int = SIDE_BY_SIDE_RUNS) -> SideBySide:
    """Median seconds of each compiled model in ``builds`` (name -> executable), timed ``runs``
    times in turn (A B A B ...), so a slow moment of this shared host hits every build alike;
    also every run. One :func:`time_model` each gave the demo's small BERT verdicts from 0.96x
    to 1.2x the untuned build on the same two builds. A first timing of one run each leaves out
    of the rounds every build :data:`PROBE_GAP` times slower than the fastest, and the rounds stop
    after two when the fastest is :data:`CLEAR_GAP` times ahead in both: timing an untuned BERT-base (over a minute a run here) five
    rounds of five runs kept `tlm compile --model bert_base` busy for over 20 minutes. The first
    build is the reference: another one's first run is stopped once it is :data:`PROBE_GAP` times
    slower than the fastest so far and past :data:`STOP_NOT_BEFORE_S` (:func:`_bounded_run`; an
    untuned LLaMA-7B layer takes minutes a run), and its figure is that lower bound (``at_least``)."""
    import statistics

    # one run of each first: a build PROBE_GAP times slower than another (an untuned BERT-base,
    # over a minute a run on 2 cores) needs no more to tell which ships; a smaller gap is timed as before
    probe: dict[str, float] = {}
    at_least: set[str] = set()
    for name, exe in builds.items():
        if probe:
            took, whole = _bounded_run(exe, args, hardware, max(PROBE_GAP * min(probe.values()), STOP_NOT_BEFORE_S))
            if not whole:
                probe[name] = took
                at_least.add(name)
                continue
        probe[name] = time_model(exe, args, hardware, repeat=1)
    # a build PROBE_GAP times slower than the fastest keeps its one timing; the others are timed in
    # rounds even when alone (one repeat of a served MobileNetV2 read 5.0-6.5 ms in separate runs)
    slow = {n for n, t in probe.items() if len(builds) > 1 and t >= PROBE_GAP * min(probe.values())}
    rest = {name: exe for name, exe in builds.items() if name not in slow}
    every: dict[str, list[float]] = {name: [probe[name]] if name in slow else [] for name in builds}
    for r in range(runs):
        for name, exe in rest.items():
            every[name].append(time_model(exe, args, hardware))
        if r == 1 and len(rest) > 1 and all(_clearly_fastest([every[n][i] for n in rest]) for i in (0, 1)):
            break  # decided after the second round only: a close first or second round times them all
    return SideBySide({name: statistics.median(v) for name, v in every.items()}, every, frozenset(at_least))


def _bounded_run(executable: Any, args: Sequence[Any], hardware: Hardware | None, limit_s: float) -> tuple[float, bool]:
    """Seconds of one run of a compiled model and whether it ran whole: once ``limit_s`` has
    passed, the VM skips the rest of its kernels (its instrument hook; a kernel already running
    finishes, and the VM's own builtins, allocations among them, still run), so the time is a
    lower bound of a run's."""
    from tvm.runtime.vm import VMInstrumentReturnKind

    vm, _ = _loaded(executable, args, hardware)
    start, cut = time.perf_counter(), [False]

    def instrument(func: Any, symbol: str, before_run: bool, ret: Any, *rest: Any) -> int:
        if before_run and not str(symbol).startswith("vm.builtin."):
            cut[0] = cut[0] or time.perf_counter() - start > limit_s
            if cut[0]:
                return VMInstrumentReturnKind.SKIP_RUN
        return VMInstrumentReturnKind.NO_OP

    vm.set_instrument(instrument)
    start = time.perf_counter()
    vm.invoke_stateful("main")
    return time.perf_counter() - start, not cut[0]


def _clearly_fastest(times: list[float], gap: float = CLEAR_GAP) -> bool:
    """The fastest of one round's timings is ``gap`` times ahead of the next."""
    first, second = sorted(times)[:2]
    return second >= gap * first


def time_torch(module: Any, args: Sequence[Any], *, threads: int, warmup: int = 5, runs: int = 30) -> float:
    """Median seconds of one PyTorch eager forward on ``threads`` threads (inference mode)."""
    import statistics

    import torch

    torch.set_num_threads(threads)
    with torch.inference_mode():
        for _ in range(warmup):
            module(*args)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            module(*args)
            times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def time_torch_compile(module: Any, args: Sequence[Any], threads: int) -> tuple[float, float]:
    """``(latency, compile seconds)`` of ``torch.compile(module)`` (inductor; the first call
    compiles, so its time is the compile time)."""
    import torch

    torch.set_num_threads(threads)
    compiled = torch.compile(module)
    t0 = time.perf_counter()
    with torch.inference_mode():
        compiled(*args)
    compile_s = time.perf_counter() - t0
    return time_torch(compiled, args, threads=threads), compile_s


def check_against_torch(executable: Any, module: Any, args: Sequence[Any],
                        hardware: Hardware | None = None) -> tuple[float, bool]:
    """``(max abs error, correct)`` of a compiled model's output against the PyTorch module's on
    ``args``: one tolerance for every whole-model build (:data:`TOLERANCE`)."""
    import numpy as np

    got, want = run_model(executable, args, hardware), torch_output(module, args)
    return float(np.max(np.abs(got - want))), bool(np.allclose(got, want, **TOLERANCE))


def torch_output(module: Any, args: Sequence[Any]) -> Any:
    """The PyTorch module's output as a numpy array (first of a tuple, ``.logits`` of an HF output)."""
    import torch

    with torch.inference_mode():
        out = module(*args)
    out = out[0] if isinstance(out, (tuple, list)) else getattr(out, "logits", out)
    return out.numpy()


def compile_and_run(mod: Any, args: Sequence[Any], hardware: Hardware | None = None,
                    database: Any | None = None) -> Any:
    """Compile ``mod`` for ``hardware`` (with ``database``'s schedules if given) and run it once."""
    return run_model(compile_model(mod, hardware, database), args, hardware)
