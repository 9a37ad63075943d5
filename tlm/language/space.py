"""The space builder: every sketch of a (task, hardware) and the choices each one leaves open.

MetaSchedule's design space (post-order-apply with the target's default schedule rules, as
``collectors.sketches`` builds it, nothing pruned) is a list of *sketches*: traces whose
instructions are fixed and whose sampling instructions carry one random decision each. Tuning
only changes those decisions, plus the value of the ``meta_schedule.parallel`` annotation
(MutateParallel rewrites it). A :class:`Choice` is one such open decision:

========  ===========================  ===========================================================
kind      instruction                  what bounds it (``Choice`` fields / live facts)
========  ===========================  ===========================================================
tile      SamplePerfectTile            ``n`` factors, product == loop extent, innermost <= ``max_innermost``
ptile     SamplePartitionedTile        ``n`` factors, product == extent, ``innerpart_factor`` divides
                                       the product of factors from ``partition_pos`` on
pick      SampleCategorical            one of ``candidates``
at        SampleComputeLocation        root, inline (when legal) or a loop index of the consumer,
                                       as TVM's ``CollectComputeLocation`` lists them
parallel  Annotate meta_schedule.      an integer in ``1..max_parallel`` (the sketch's value is
          parallel                     ``num_cores * max_jobs_per_core``, MutateParallel's limit)
========  ===========================  ===========================================================

Loop extents and compute-location candidates can depend on earlier decisions, so the space
keeps them as *facts for the prompt* only when they are the same in every replay it tries
(the sketch's own decisions plus a few random ones); the exact live domain is computed while
replaying (``tlm.language.replay``).
"""
from __future__ import annotations

import functools
import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from collectors.hardware import Hardware
from collectors.sketches import design_space, skeleton
from collectors.tasks import Task
from collectors.tir import as_target, plain_json
from tlm.language.errors import LanguageError
from tlm.language.trace_flow import own_loop_tiles

logger = logging.getLogger(__name__)

#: The annotation MutateParallel rewrites (an instruction input, not a decision).
PARALLEL_KEY = "meta_schedule.parallel"
#: Sampling instruction kind -> choice kind.
SAMPLE_KINDS = {
    "SamplePerfectTile": "tile",
    "SamplePartitionedTile": "ptile",
    "SampleCategorical": "pick",
    "SampleComputeLocation": "at",
}
#: Instruction kinds the language knows (an unknown kind in a sketch is a LanguageError).
INSTRUCTION_KINDS = (
    "AddUnitLoop", "Annotate", "AnnotateBufferAccess", "Bind", "Blockize", "CacheIndex",
    "CacheInplace", "CacheRead", "CacheWrite", "ComputeAt", "ComputeInline", "DecomposePadding",
    "DecomposeReduction", "EnterPostproc", "Fuse", "FuseReductionEpilogue", "GetChildBlocks",
    "GetConsumers", "GetLoops", "GetOutputBlocks", "GetProducers", "GetSBlock", "LoopPartition",
    "Merge", "PadEinsum", "Parallel", "RFactor", "ReIndex", "ReadAt", "ReindexCacheRead",
    "ReindexCacheWrite", "Reorder", "ReorderBlockIterVar", "ReverseComputeAt",
    "ReverseComputeInline", "RollingBuffer", "SampleCategorical", "SampleComputeLocation",
    "SamplePartitionedTile", "SamplePerfectTile", "SetScope", "Split", "StorageAlign",
    "Tensorize", "TransformBlockLayout", "TransformLayout", "Unannotate", "Unroll",
    "UnsafeHideBufferAccess", "UnsafeSetDType", "Vectorize", "WriteAt",
)
#: How many random replays decide whether a fact is static (same in every replay).
FACT_REPLAYS = 3


class SpaceError(LanguageError):
    """A sketch the language cannot describe (unknown instruction kind, non-constant extent);
    ``position`` is the instruction index in the sketch."""


@dataclass(frozen=True)
class Choice:
    """One open decision of a sketch, with the facts that bound it."""

    inst_index: int  # position of the instruction in the sketch trace
    kind: str  # "tile" | "ptile" | "pick" | "at" | "parallel"
    n: int = 0  # tile/ptile: number of factors
    max_innermost: int = -1  # tile: bound on the innermost factor (-1: none)
    partition_pos: int = 0  # ptile: factors from this position on form the inner part
    innerpart_factor: int = 1  # ptile: must divide the inner part's product
    candidates: tuple[int, ...] = ()  # pick: candidate values, in index order
    max_parallel: int = 0  # parallel: largest legal parallel extent
    extent: int | None = None  # tile/ptile: loop extent when static, else None
    n_locations: int | None = None  # at: number of legal locations when static, else None


@dataclass
class Sketch:
    """One sketch of the design space: its trace, its choices and its instruction kinds."""

    sketch_id: int  # index in the design space (the ``sketch_id`` column of a record)
    trace: Any  # tvm.s_tir.schedule.Trace of the sketch (with its own sampled decisions)
    kinds: tuple[str, ...]  # instruction kinds in trace order (before EnterPostproc)
    open_choices: tuple[Choice, ...]  # open decisions in trace order, as the trace states them (no facts)
    mod: Any = None  # the task's module, whose replays give the choices' static facts
    ann_keys: dict[int, str] = field(default_factory=dict)  # Annotate position -> key
    dead: str | None = None  # why no decision gives a valid program; "" alive, None unchecked
    own_tiles: frozenset = frozenset()  # tile choices of a block iterator's own loop (trace_flow.own_loop_tiles)
    thread_groups: tuple = ()  # GPU: tlm.language.gpu.ThreadGroup bounds on products of tile factors
    shared_memory: Any = None  # GPU: tlm.language.gpu.SharedMemory footprint model of its cache reads
    vector_lanes: dict = field(default_factory=dict)  # GPU: pick instruction -> most fetch lanes

    @property
    def insts(self) -> list:
        return list(self.trace.insts)

    # The static facts are read when first asked for: a greedy answer of one writes one sketch of
    # the three a convolution has (tlm.service.generator.GREEDY_SKETCHES), and each sketch's
    # replays cost ~2 ms of a new subgraph's request.
    @functools.cached_property
    def choices(self) -> tuple[Choice, ...]:
        """The open decisions in trace order with their static facts (``extent``, ``n_locations``:
        :func:`_with_static_facts`); the schedule of the sketch's own decisions is kept for
        :func:`take_own_replay`."""
        choices, own = _with_static_facts(self.trace, self.mod, list(self.open_choices), self.own_tiles)
        if len(_OWN_REPLAYS) >= _OWN_REPLAYS_SIZE:
            _OWN_REPLAYS.pop(next(iter(_OWN_REPLAYS), None), None)  # another request may have taken it
        _OWN_REPLAYS[id(self)] = (self, own)
        return tuple(choices)

    # The skeletons are computed when first asked for: only reading a record's trace
    # (``tlm.language.sentences.encode``) needs them, and they cost ~3 ms a sketch, a tenth of a
    # new subgraph's greedy request.
    @functools.cached_property
    def skeleton(self) -> tuple[str, ...]:
        """:func:`collectors.sketches.skeleton` of the full trace."""
        return skeleton(self.trace)

    @property
    def simple_skeleton(self) -> tuple[str, ...]:
        """... of the dead-code-free trace (how some search strategies store their traces)."""
        return self._simple[0]

    @property
    def simple_choice_index(self) -> tuple[int, ...]:
        """The choices' positions in the simplified trace; () when simplifying removes a choice
        (a dead choice: simplified traces of this sketch are not expressible)."""
        return self._simple[1]

    @functools.cached_property
    def _simple(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        simple = self.trace.simplified(remove_postproc=True)
        index = _choice_positions(simple)
        if len(index) != len(_choice_positions(self.trace)):
            index = []
        return skeleton(simple), tuple(index)


@dataclass
class Space:
    """The design space of one task on one hardware."""

    task: Task
    hardware: Hardware
    target: Any  # tvm.target.Target
    sketches: list[Sketch]
    uid: int = field(default_factory=lambda: next(_SPACE_IDS))  # unique per built space (cache keys)


_SPACE_IDS = itertools.count()


def build_space(task: Task, hardware: Hardware) -> Space:
    """Every sketch of ``task`` on ``hardware`` with its choices (cached per workload+hardware)."""
    # the same objects as a recent call: decoding asks once per word of every row (73,000
    # times for a full-size MobileNetV2's ranked pools), and the key below costs ~0.1 ms
    seen = _BY_OBJECT.get((id(task), id(task.mod), id(hardware)))
    if seen is not None and seen[0] is task and seen[1] is task.mod and seen[2] is hardware:
        return seen[3]
    # Names are part of the key: the workload key (a structural hash) ignores them, but traces
    # find blocks by name and the prompts kept on a space say the task's name and op kind.
    key = (task.workload_key, block_names(task.mod), task.task_name, task.op_kind, hardware.key,
           json.dumps(hardware.target, sort_keys=True))
    space = _CACHE.get(key)
    if space is None:
        space = _build(task, hardware)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = space
    if len(_BY_OBJECT) >= _CACHE_SIZE:
        _BY_OBJECT.clear()
    # the objects are kept with it, so their ids are not reused while the entry stands
    _BY_OBJECT[(id(task), id(task.mod), id(hardware))] = (task, task.mod, hardware, space)
    return space


_CACHE: dict[tuple, Space] = {}
_BY_OBJECT: dict[tuple, tuple[Any, Any, Any, Space]] = {}


def clear_space_cache() -> None:
    """Forget every built space (and the prompts kept on it): the next request of a subgraph is
    as a deployer's first request of a new one (``bench/serve.py`` times it cold)."""
    _CACHE.clear()
    _BY_OBJECT.clear()
#: Spaces kept in memory (one per workload and hardware; a space holds a few traces).
_CACHE_SIZE = 512


_NAMES: dict[int, tuple[Any, tuple[str, ...]]] = {}


def block_names(mod: Any) -> tuple[str, ...]:
    """Names of every block of the ``main`` PrimFunc, in program order (cached per module)."""
    hit = _NAMES.get(id(mod))
    if hit is not None and hit[0] is mod:
        return hit[1]
    names = _walk_block_names(mod)
    if len(_NAMES) > 4096:
        _NAMES.clear()
    _NAMES[id(mod)] = (mod, names)  # keeps mod alive, so the id is not reused while cached
    return names


def sblocks(mod: Any) -> list:
    """Every SBlock of ``mod``'s ``main`` (or of a PrimFunc), root included, in program order."""
    func = mod["main"] if hasattr(mod, "functions") else mod
    out: list = []

    def walk(s: Any) -> None:
        if type(s).__name__ == "SBlock":
            out.append(s)
        for attr in ("block", "body", "then_case", "else_case"):
            child = getattr(s, attr, None)
            if child is not None and not isinstance(child, (int, str)):
                walk(child)
        for child in getattr(s, "seq", None) or []:
            walk(child)

    walk(func.body)
    return out


def _walk_block_names(mod: Any) -> tuple[str, ...]:
    return tuple(str(b.name_hint) for b in sblocks(mod))


def _build(task: Task, hardware: Hardware) -> Space:
    target = as_target(hardware)
    schedules = design_space(task.mod, target)
    gpu_limits = None
    if hardware.kind == "cuda":
        attrs = target.attrs
        gpu_limits = (int(attrs.get("max_threads_per_block", 1024)),
                      int(attrs.get("max_shared_memory_per_block", 49152)),
                      int(attrs.get("thread_warp_size", 32)))
    static = _static_shapes(task.mod)
    sketches = [_describe(i, sch.trace, task.mod, gpu_limits, static) for i, sch in enumerate(schedules)]
    logger.debug("space of %s on %s: %d sketches", task.task_name, hardware.key, len(sketches))
    return Space(task=task, hardware=hardware, target=target, sketches=sketches)


def _static_shapes(mod: Any) -> bool:
    """Whether every block iterator and buffer a block reads or writes in ``mod`` has constant extents (a
    symbolic one, a dynamic batch say, makes some loop extent no constant: :class:`SpaceError`)."""
    from tvm import tirx

    blocks = sblocks(mod)
    dims = [iv.dom.extent for b in blocks for iv in b.iter_vars]
    dims += [d for b in blocks for r in [*b.reads, *b.writes] for d in r.source.shape]
    return all(isinstance(d, tirx.IntImm) for d in dims)


def _describe(sketch_id: int, trace: Any, mod: Any, gpu_limits: tuple[int, int, int] | None = None,
              static_shapes: bool = True) -> Sketch:
    kinds: list[str] = []
    choices: list[Choice] = []
    ann_keys: dict[int, str] = {}
    for i, inst in enumerate(trace.insts):
        kind = inst.kind.name
        if kind == "EnterPostproc":
            break
        if kind not in INSTRUCTION_KINDS:
            raise SpaceError(i, f"sketch {sketch_id}: unknown instruction kind {kind!r}")
        kinds.append(kind)
        attrs = plain_json(list(inst.attrs))
        if kind == "SamplePerfectTile":
            choices.append(Choice(i, "tile", n=int(attrs[0]), max_innermost=int(attrs[1])))
        elif kind == "SamplePartitionedTile":
            choices.append(Choice(i, "ptile", n=int(attrs[0]), partition_pos=int(attrs[1]),
                                  innerpart_factor=int(attrs[2])))
        elif kind == "SampleCategorical":
            choices.append(Choice(i, "pick", candidates=tuple(int(c) for c in attrs[0])))
        elif kind == "SampleComputeLocation":
            choices.append(Choice(i, "at"))
        elif kind == "Annotate":
            ann_keys[i] = str(attrs[0])
            if attrs[0] == PARALLEL_KEY:
                value = plain_json(inst.inputs[1])
                choices.append(Choice(i, "parallel", max_parallel=int(value)))
    insts = list(trace.insts)
    cut = next((i for i, x in enumerate(insts) if x.kind.name == "EnterPostproc"), len(insts))
    own_tiles = frozenset(own_loop_tiles(insts[:cut], choices))
    groups: tuple = ()
    smem, lanes = None, {}
    if gpu_limits is not None:
        from tlm.language.gpu import thread_groups
        from tlm.language.shared_memory import shared_memory, vector_lanes

        insts = plain_json(trace.as_json(remove_postproc=True))[0]
        groups = thread_groups(insts, gpu_limits[0], gpu_limits[2])
        try:
            smem = shared_memory(trace, mod, insts, gpu_limits[1])
        except ValueError as exc:  # generation cannot bound this sketch's shared memory
            logger.warning("sketch %d: shared memory not modelled: %s", sketch_id, exc)
        lanes = vector_lanes(trace, mod, insts)
    sketch = Sketch(
        sketch_id=sketch_id, trace=trace, kinds=tuple(kinds), open_choices=tuple(choices), mod=mod,
        thread_groups=groups, shared_memory=smem, vector_lanes=lanes, ann_keys=ann_keys, own_tiles=own_tiles,
    )
    if gpu_limits is not None or not static_shapes:
        sketch.choices  # noqa: B018 - read now: a symbolic extent is refused when the space is built
    return sketch


#: The schedule of a recently described sketch's own decisions (replayed to read its facts), by
#: ``id(sketch)``: the liveness check (``tlm.language.decisions.live_sketches``) starts from it
#: instead of replaying the sketch again. A few dozen at most: schedules hold their module.
_OWN_REPLAYS: dict[int, tuple[Sketch, Any]] = {}
_OWN_REPLAYS_SIZE = 48


def take_own_replay(sketch: Sketch) -> Any | None:
    """The schedule of ``sketch``'s own decisions replayed when its space was built (postprocessing
    not entered), handed out once; None when it is gone (then replay ``sketch.trace``)."""
    hit = _OWN_REPLAYS.pop(id(sketch), None)
    return hit[1] if hit is not None and hit[0] is sketch else None


def _choice_positions(trace: Any) -> list[int]:
    """Positions of the instructions that hold choices (sampling + parallel annotations)."""
    out = []
    for i, inst in enumerate(trace.insts):
        kind = inst.kind.name
        if kind == "EnterPostproc":
            break
        if kind in SAMPLE_KINDS:
            out.append(i)
        elif kind == "Annotate" and str(plain_json(inst.attrs[0])) == PARALLEL_KEY:
            out.append(i)
    return out


def _with_static_facts(trace: Any, mod: Any, choices: list[Choice], fixed: frozenset) -> tuple[list[Choice], Any]:
    """Fill ``extent`` / ``n_locations`` where every replay agrees (else leave None); returns
    them with the schedule of the sketch's own decisions (:func:`take_own_replay`).

    The sketch's own decisions are replayed whole, then :data:`FACT_REPLAYS` random ones, each only as
    far as the last choice a decision could change: a tile of a block iterator's own loop
    (``fixed``: ``trace_flow.own_loop_tiles``) has that loop's extent in every replay, so it is read
    from the first. The facts are what replaying every choice in every run gives (tests/tlm/test_language.py);
    the full replays were half of a new subgraph's design space (~25 ms of a greedy request)."""
    from tvm.s_tir.schedule import Schedule, Trace
    from tvm.s_tir.schedule._ffi_api import ScheduleGet as schedule_get

    from tlm.language.replay import compute_locations

    by_index = {c.inst_index: c for c in choices}
    seen: dict[int, set] = {c.inst_index: set() for c in choices}
    insts = list(trace.insts)
    open_facts = [c.inst_index for c in choices if c.kind in ("tile", "ptile", "at") and c.inst_index not in fixed]
    last = max(open_facts, default=-1)
    runs = [trace] + ([Trace(trace.insts, {}) for _ in range(FACT_REPLAYS)] if open_facts else [])
    own = None
    for seed, tr in enumerate(runs):
        sch = Schedule(mod, seed=seed + 1)
        own = own or sch
        counter = [0]
        stop = last if seed else len(insts)

        def provider(inst, inputs, attrs, decision, sch=sch, counter=counter, stop=stop, seed=seed):
            i = counter[0]
            counter[0] += 1
            if i > stop:
                raise _Enough  # TVM raises its own error in its place: counter says why
            c = by_index.get(i)
            if c is None or (seed and i in fixed):
                return decision
            if c.kind in ("tile", "ptile"):
                ext = schedule_get(sch, inputs[0]).extent  # Schedule.get's type check: 2 ms a new task
                seen[i].add(int(ext.value) if hasattr(ext, "value") else None)
            elif c.kind == "at":
                seen[i].add(len(compute_locations(sch, inputs[0])))
            return decision

        try:
            tr.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
        except Exception:  # noqa: BLE001 - TVM turns the provider's exception into its own
            if counter[0] != stop + 2:  # not stopped by the provider past the last choice read
                raise
    out = []
    for c in choices:
        vals = seen[c.inst_index]
        static = next(iter(vals)) if len(vals) == 1 else None
        if c.kind in ("tile", "ptile"):
            if None in vals:
                raise SpaceError(c.inst_index, "loop extent is not a constant")
            out.append(_replace(c, extent=static))
        elif c.kind == "at":
            out.append(_replace(c, n_locations=static))
        else:
            out.append(c)
    return out, own


class _Enough(Exception):
    """Raised by a fact replay's decision provider past the last choice it reads: the rest of
    the trace is not applied."""


def _replace(c: Choice, **kw) -> Choice:
    from dataclasses import replace

    return replace(c, **kw)
