"""Sketches: the design space MetaSchedule explores, sketch identity, and program validity.

A *sketch* is a schedule whose trace holds every instruction the target's default schedule
rules apply (post-order-apply over the blocks), with one random decision per sampling
instruction. Tuning only ever changes those decisions (and the parallel extent MutateParallel
rewrites), so the *instruction skeleton* of a measured trace tells which sketch it came from:
:func:`sketch_id`. The tensor language (tlm/language/space.py) builds its prompts on these sketches.

Validity is MetaSchedule's own: a replayed schedule is a valid program when every
postprocessor of the target accepts it (:func:`refusing_postproc`), and every output element
is still written (:func:`unwritten_output`). The tuner, the tensor language, the rule baseline
and whole-model compile all ask this one function.
"""
from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Sequence

from collectors.fast_import import install_for_target
from collectors.tir import as_module, as_target, plain_json

if TYPE_CHECKING:
    from collectors.hardware import Hardware
    from collectors.tasks import Task

logger = logging.getLogger(__name__)

#: Annotation whose value MutateParallel changes during the search: not part of the skeleton.
_MUTABLE_ANNOTATIONS = frozenset({"meta_schedule.parallel"})


def tune_context(mod: Any, target: Any, *, seed: int = 0, task_name: str = "main", num_threads: int | None = None,
                 space_generator: str | None = "post-order-apply"):
    """A ``TuneContext`` with MetaSchedule's defaults for ``target`` (what ``tune_tir`` uses);
    ``space_generator`` None: without one (the target's schedule rules and mutators, 2.5 ms, are
    not built: enough for initialising postprocessors).

    The CPU import fix is applied first, so this costs ~1 s instead of ~20 s on CPU nodes.
    """
    tgt = as_target(target)
    install_for_target(tgt)
    from tvm.s_tir import meta_schedule as ms

    kwargs: dict[str, Any] = {}
    if num_threads is not None:
        kwargs["num_threads"] = num_threads
    return ms.TuneContext(
        mod=as_module(mod),
        target=tgt,
        space_generator=space_generator,
        task_name=task_name,
        rand_state=seed,
        **kwargs,
    )


def design_space(mod: Any, target: Any, *, seed: int = 0) -> list:
    """The sketches (``tvm.s_tir.schedule.Schedule``) MetaSchedule tunes ``mod`` over.

    Post-order-apply with the target's default schedule rules (llvm rules for a CPU target,
    cuda rules with thread binding for a CUDA target); nothing pruned. The sketches' random
    decisions depend on ``seed``; their instruction skeletons do not.
    """
    ctx = tune_context(mod, target, seed=seed)
    sketches = list(ctx.generate_design_space())
    logger.debug("design space of %d sketches", len(sketches))
    return sketches


def skeleton(trace: Any, *, simplify: bool = False) -> tuple:
    """The instruction skeleton of a trace: kinds, inputs and attrs before ``EnterPostproc``.

    Decisions are left out, and so is the value of a ``meta_schedule.parallel`` annotation
    (MutateParallel rewrites it). ``trace`` may be a ``Trace``, a ``Schedule`` or trace JSON
    (``[insts, decisions]``, as a string or parsed). ``simplify`` first removes dead code
    (live traces only), which is how some search strategies store their traces.
    """
    out = []
    for inst in _insts_json(trace, simplify):
        kind, inputs, attrs = inst[0], inst[1], inst[2]
        if kind == "EnterPostproc":
            break
        inputs = list(inputs)
        if kind == "Annotate" and attrs and attrs[0] in _MUTABLE_ANNOTATIONS and len(inputs) > 1:
            inputs[1] = "*"
        out.append(json.dumps([kind, inputs, attrs], sort_keys=True, separators=(",", ":")))
    return tuple(out)


def sketch_id(trace: Any, sketches: Sequence[Any]) -> int:
    """Index of the sketch whose instruction skeleton matches ``trace``; -1 if none does.

    A sketch matches in its written form or with dead code removed, so traces from either
    kind of search strategy find their sketch.
    """
    key = skeleton(trace)
    for i, sk in enumerate(sketches):
        if skeleton(sk) == key or skeleton(sk, simplify=True) == key:
            return i
    return -1


def _insts_json(trace: Any, simplify: bool) -> list:
    from tvm.s_tir.schedule import Schedule, Trace

    if isinstance(trace, Schedule):
        trace = trace.trace
    if isinstance(trace, Trace):
        if simplify:
            trace = trace.simplified(remove_postproc=True)
        return plain_json(trace.as_json(remove_postproc=True))[0]
    if isinstance(trace, str):
        trace = json.loads(trace)
    if isinstance(trace, (list, tuple)) and len(trace) == 2 and isinstance(trace[0], list):
        return list(trace[0])
    raise TypeError(f"expected a Trace, a Schedule or trace JSON, got {type(trace).__name__}")


def probe_compute_location(sch: Any, block_rv: Any, decision: int) -> int:
    """The ``SampleComputeLocation`` decision TVM takes for ``decision`` on ``block_rv`` now: it
    when legal, else the largest legal one below it (-1 root, -2 inline); the probe's
    instruction is taken back out of the trace, which stays the sketch's."""
    rv = sch.sample_compute_location(block_rv, decision=decision)
    trace = sch.trace
    got = int(trace.decisions[trace.insts[-1]])
    trace.pop()
    sch.remove_rv(rv)
    return got


_POSTPROCS: dict[tuple, tuple] = {}


def postprocs(task: "Task", hardware: "Hardware") -> tuple:
    """The target's MetaSchedule postprocessors, initialised with a tune context (cached per
    workload and hardware: initialising them costs a tune context)."""
    key = (task.workload_key, hardware.key)
    if key not in _POSTPROCS:
        from tvm.s_tir import meta_schedule as ms

        # no space generator: the postprocessors read the context's target and module, and the
        # target's schedule rules and mutators cost 2.5 ms a new task (a greedy request's 4%)
        ctx = tune_context(task.mod, hardware, task_name=task.task_name, space_generator=None)
        procs = ms.Postproc.create("cuda" if hardware.kind == "cuda" else "llvm")
        for p in procs:
            p._initialize_with_tune_context(ctx)  # noqa: SLF001 - MetaSchedule's own API
        _POSTPROCS[key] = (ctx, tuple(procs))
    return _POSTPROCS[key][1]


def refusing_postproc(sch: Any, task: "Task", hardware: "Hardware") -> str | None:
    """Run every postprocessor of the target on ``sch`` (a replayed schedule, postprocessing
    entered here); the name of the first one that refuses (``UnwrittenOutput``: see
    :func:`unwritten_output`), or None when all accept."""
    if unwritten_output(sch.mod) is not None:
        return "UnwrittenOutput"
    sch.enter_postproc()
    return next((type(p).__name__ for p in postprocs(task, hardware) if not p.apply(sch)), None)


def unwritten_output(mod: Any) -> str | None:
    """The block (and its buffer) whose loops run fewer times than the output buffer (a parameter
    of the function) it alone writes has elements, or None. Such a program replays and passes
    every postprocessor, and leaves part of its output unwritten: TVM's ``reverse_compute_at`` of
    a consumer larger than its producer's tile (a 112 -> 113 pad fused into a convolution)
    computes only the producer's 112 x 112. Four of full-size MobileNetV2's 52 tasks with its
    batch norms folded (``fused_conv2d*_add*_clip*_pad*``) were served so, wrong by up to 17%
    (measured). An intermediate is not checked: it may be written only where it is read (a max
    pool's padded input)."""
    import math
    from collections import Counter

    from collectors.tir import block_realizes

    func = next(iter(as_module(mod).functions.values()))
    def known(xs: Any) -> bool:
        return all(isinstance(getattr(x, "value", None), int) for x in xs)

    outputs = {getattr(p, "name", None) for p in func.params}
    realizes = list(block_realizes(func.body))
    writers = Counter(region.source.name for r, _ in realizes for region in r.block.writes)
    for realize, loops in realizes:
        for region in realize.block.writes:
            buf = region.source
            if buf.name not in outputs or writers[buf.name] != 1 or not known(buf.shape) \
                    or not known(lp.extent for lp in loops):
                continue
            runs, size = math.prod(int(lp.extent) for lp in loops), math.prod(int(d) for d in buf.shape)
            if runs < size:
                return f"{realize.block.name_hint} runs {runs} times for the {size} elements of {buf.name}"
    return None
