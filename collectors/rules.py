"""A rule scheduler for CPUs: the fast, measurement-free baseline, blocked as BLIS blocks GEMM.

TVM's dlight has no CPU rule for matmul or conv2d (it leaves a 512^3 matmul at ~300 ms
against ~2.4 ms tuned), so this module writes one: take the sketch MetaSchedule would tune
(its multi-level tiling ``SSRSRS`` on CPUs: spatial levels S0 S1 S2 S3, reduction levels R0 R1,
nested S0 S1 R0 S2 R1 S3) and choose every decision from the hardware alone, never measuring.

**The blocked plan** (BLIS-style, :mod:`collectors.blocking`; every block whose output has a
contiguous axis):

* **micro-kernel** (S3): ``MR`` rows x ``NR`` columns of accumulators (``micro_kernel``):
  the columns on the output's stride-1 axis (a power-of-two number of vectors), the rows on
  the axis the vector-loaded input does not depend on (a matmul's ``i``, a convolution's output
  channel), so each loaded vector is reused ``MR`` times; within half the vector registers;
* **inner reduction** (R1): as deep as keeps both micro-panels within half the L1, at most
  :data:`INNER_REDUCTION` (the unpacked input's rows share an L1 set);
* **where the reuse lives** (``panel_fits``): S2 sits inside the outer reduction step R0,
  so whatever it holds is swept once per step. Where the B micro-panel of the whole reduction
  fits the L1 (BERT's attention matmuls, 1x1 convolutions with a short reduction or a small
  image), the **panel** plan: S2 = 1 (each micro-tile keeps its accumulators over the whole
  reduction), each chunk of the parallel loop one block of rows, re-reading the small panel
  rather than writing every row's output at once (a 112 x 112 1x1 convolution 1.6x so).
  Elsewhere (the dense matmuls of BERT and ViT, K 768-3072) the **sweep** plan: S2 holds the L2
  block, columns of micro-tiles whose input panels share half the L2, rows a quarter (a one-row
  micro-tile, ViT's 197 prime tokens: as few columns as keep its accumulators in the L1);
* **a pointwise convolution's small image** (``whole_plane``: a 1x1 convolution at 7 x 7 with
  AVX-512, whose 7-wide rows fill 7 of 16 lanes): the **plane** plan instead, each channel's whole
  plane one vector run, a block of channels in half the L1 (``plane_plan``: 1.67x on the 22 zoo
  tasks it changes, Emerald Rapids);
* **parallel outer loops** (S0): about 8 chunks per core (load balance without tiny tasks):
  the sweep splits first the loops whose chunks read the least input again (``reread``), the
  panel plan the blocks of rows, columns and the other axes; a task whose work is less than starting
  a parallel region saves (``collectors.threads.parallel_target``) keeps S0 at 1: no parallel loop;
* **unroll**: ``max_step`` 64 where the sketch samples one (MetaSchedule's middle choice).

A convolution that takes no panel plan takes no sweep either: each micro-tile keeps its
accumulators over an inner reduction as deep as the L1 allows (the sweep's kc of 6 reloaded
them every 6 FMAs: ResNet-50's 3x3 convolutions ran 1.7-2.8x faster so, Rocket Lake).

A block whose vector-loaded input is read at a stride and which has no row axis to reuse a
loaded vector (a depthwise convolution of stride 2) gets the **window plan** instead
(``blocking.window_plan``): scalar outputs, two of a row at a time, each over its whole window
innermost, unrolled all the way (``max_step`` the sketch's largest): 3.8x the blocked plan's
14-lane gathers on EfficientNet-B0's 5x5 stride-2 depthwise convolution (Rocket Lake).

Measured on a 2-core Zen 3 against the Roller-style tiles it replaces (bench/studies/rules.py):
1.04-1.35x on BERT-base's matmuls, 4.7x on MobileNetV2's classifier, 0.94-1.20x on ResNet-50
convolutions; the panel plan where it fits against the sweep everywhere (2026-12-05, the 20
quality tasks and 4 training convolutions, ``bench.studies.rules --quality 20``): 0.79x -> 0.88x
MS@256 geomean. Blocks the plan does not cover (no contiguous output axis, other tilings) keep the
Roller-style tiles (``blocked=False`` gives them everywhere): the innermost spatial loop a
multiple of the vector lanes up to two vectors, the next up to 8 rows, the inner reduction the
largest divisor up to 8 within half the L1, outer blocks of up to 32.

**Where a producer is computed** (a convolution's pad; :func:`compute_location`): never inlined
(its ``if_then_else`` would sit in every load of the inner loops); a regular convolution pads
once at the root, a depthwise one each channel's plane at its channel loop. The design space's
random draw, which the rules kept before, inlined EfficientNet-B0's 5x5 depthwise pads: 1.75x
over the 24 zoo tasks this changes, up to 14x (Rocket Lake, bench/studies/pad_location.py).

The sketch chosen is the first in :func:`sketch_order` whose rule-chosen program every postprocessor
accepts (:func:`collectors.sketches.refusing_postproc`). The rules' program is also a candidate in
every ranked pool of the generator (``tlm.service.generator.rule_rows``). On CUDA, use ``tvm.s_tir.dlight``.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from collectors.block_axes import block_axes
from collectors.blocking import (CHUNKS_PER_CORE, INNER_REDUCTION, PLANS, blocked_plan, divisors, l1_bytes,
                                 largest_divisor, unvectorized)
from collectors.hardware import Hardware
from collectors.sketches import design_space, probe_compute_location, refusing_postproc
from collectors.tasks import Task
from collectors.threads import task_parallel_target
from collectors.tir import as_module, vector_lanes

log = logging.getLogger(__name__)

#: Register-tile rows (second-innermost spatial loop).
REGISTER_ROWS = 8
#: Largest middle-level (L1 block) factor of an outer spatial loop.
OUTER_BLOCK = 32
#: Unroll ``max_step`` chosen where a sketch samples one.
UNROLL_STEP = 64
#: The steps a CPU sketch samples from (MetaSchedule's ``ParallelizeVectorizeUnroll`` rule, ``unroll_max_steps``).
UNROLL_STEPS = (0, 16, 64, 512)
#: Where producers are computed (``rule_schedule(locations=...)``): by :func:`compute_location`,
#: or where the design space's draw put them (the rules before 2026-12-06).
LOCATIONS = ("rule", "sketch")
#: ``SampleComputeLocation`` decisions that are no loop.
ROOT, INLINE = -1, -2


#: The rules' second opinions: the knobs they fix otherwise, each tried on its own. Never served
#: unmeasured: a ranked pool puts them right after the rules' own program, so that a measured
#: budget (best-of-k, ``tlm compile --budget``) tries them first (``tlm.service.generator.rule_rows``).
#: Chosen by ``python -m bench.studies.rule_portfolio`` (one call per task; levers.md): MetaSchedule's
#: other auto-unroll steps (512: 1.25x on ViT's MLP matmul; 16: 1.24x on `conv2d6`), the Roller-style
#: tiles (1.4-1.7x on MobileNetV2's `conv2d25`/`conv2d29` and BERT's `matmul1`), kc capped at 6
#: (which kc wins depends on the cache sets), and one parallel chunk a core at a deeper kc (BERT's
#: unpacked dense layers 1.05-1.1x). Rocket Lake, 2026-12-07: the rules 0.98x MS@256 on the 20
#: quality tasks, the fastest of them and the first four 1.03x, of all six 1.05x; on the 16 training
#: workloads 0.87x, 0.91x, 0.91x the corpus's best.
VARIANTS: tuple[dict[str, Any], ...] = ({"unroll": 512}, {"unroll": 16}, {"blocked": False}, {"inner_reduction": 6},
                                        {"chunks_per_core": 1, "inner_reduction": 16},
                                        {"chunks_per_core": 1, "inner_reduction": 24})


@dataclass(frozen=True)
class RuleOptions:
    """The knobs of :func:`rule_schedule` (its docstring says what each does); a variant sets some."""

    blocked: bool = True
    blocking: str = "auto"
    locations: str = "rule"
    unroll: int = UNROLL_STEP
    planes: bool = True
    inner_reduction: int = INNER_REDUCTION
    chunks_per_core: int = CHUNKS_PER_CORE


@dataclass
class RuleSchedule:
    """The rule scheduler's program for one task."""

    schedule: Any  # the postprocessed tvm.s_tir.schedule.Schedule
    sketch_index: int  # which sketch of the design space
    decisions: dict = field(default_factory=dict)  # instruction index -> decision chosen by rule
    schedule_s: float = 0.0  # time to choose and check it (the "compile time" of the baseline)


def rule_schedule(task: Task, hardware: Hardware, *, blocked: bool = True, blocking: str = "auto",
                  locations: str = "rule", unroll: int = UNROLL_STEP, planes: bool = True,
                  inner_reduction: int = INNER_REDUCTION, chunks_per_core: int = CHUNKS_PER_CORE) -> RuleSchedule:
    """The rule-chosen, postprocessed schedule of ``task`` for a CPU ``hardware``.

    ``blocked=False``: the Roller-style tiles alone (the rule baseline before the blocked plan,
    kept to measure one against the other: bench/studies/rules.py); ``blocking``: which blocked
    plan (:data:`PLANS`); ``locations``: where a producer (a convolution's pad) is computed,
    "rule" (:func:`compute_location`) or "sketch" (the design space's own draw, as the rules
    left it before; bench/studies/pad_location.py measures one against the other); ``unroll``: the
    ``max_step`` taken where the sketch samples one (bench/studies/unroll.py); ``planes=False``: no
    block takes ``blocking.plane_plan`` (bench/studies/plane.py measures it against that);
    ``inner_reduction``: the blocked plan's cap on the inner reduction (``blocking.INNER_REDUCTION``;
    bench/studies/rule_portfolio.py measures others); ``chunks_per_core``: the parallel chunks per
    core the blocked plan's sweep aims for (``blocking.CHUNKS_PER_CORE``). Raises ``ValueError`` for a
    CUDA hardware (dlight's job) and when no sketch yields a program every postprocessor accepts."""
    knobs = RuleOptions(blocked=blocked, blocking=blocking, locations=locations, unroll=unroll, planes=planes,
                        inner_reduction=inner_reduction, chunks_per_core=chunks_per_core)
    return _programs(task, hardware, [knobs])[0]


def rule_variants(task: Task, hardware: Hardware, variants: tuple[dict[str, Any], ...] = VARIANTS) -> list[RuleSchedule]:
    """The rules' program (:func:`rule_schedule`), then each of ``variants`` (its options; by
    default :data:`VARIANTS`) that gives one, the design space built once for all. Raises
    ``ValueError`` as :func:`rule_schedule` does when the rules' own program has no sketch; a
    variant no sketch accepts is left out. Programs may repeat (a variant the rules' own choice
    already made)."""
    return _programs(task, hardware, [RuleOptions(), *(RuleOptions(**v) for v in variants)])


def _programs(task: Task, hardware: Hardware, options: list[RuleOptions]) -> list[RuleSchedule]:
    """The program of each of ``options`` on one design space (the first must give one)."""
    opts = [_checked(hardware, o) for o in options]
    t0 = time.perf_counter()
    sketches = design_space(as_module(task.mod), hardware)
    built = time.perf_counter() - t0
    out = []
    for n, o in enumerate(opts):
        try:
            out.append(_rule_schedule(task, hardware, sketches, built, o))
        except ValueError:
            if n == 0:
                raise
    return out


def _checked(hardware: Hardware, o: RuleOptions) -> RuleOptions:
    """``o``, once :func:`rule_schedule`'s argument checks pass on ``hardware``."""
    if hardware.kind != "cpu":
        raise ValueError(f"the rule scheduler is for CPUs; {hardware.key} is {hardware.kind} (use tvm.s_tir.dlight)")
    if o.blocking not in PLANS:
        raise ValueError(f"unknown blocked plan {o.blocking!r}; one of {', '.join(PLANS)}")
    if o.locations not in LOCATIONS:
        raise ValueError(f"unknown compute locations {o.locations!r}; one of {', '.join(LOCATIONS)}")
    if o.unroll not in UNROLL_STEPS:
        raise ValueError(f"unroll step {o.unroll} is none a sketch samples; one of {', '.join(map(str, UNROLL_STEPS))}")
    for knob, value in (("inner_reduction", o.inner_reduction), ("chunks_per_core", o.chunks_per_core)):
        if int(value) < 1:
            raise ValueError(f"{knob} must be at least 1, got {value}")
    return o


def _rule_schedule(task: Task, hardware: Hardware, sketches: list, built_s: float, o: RuleOptions) -> RuleSchedule:
    """:func:`rule_schedule` on a design space built already (in ``built_s``): the first sketch,
    in the rules' order, whose rule-chosen program every postprocessor accepts."""
    t0 = time.perf_counter() - built_s
    order = sketch_order(task, hardware, [sk.trace for sk in sketches])
    refused = []
    serial = task_parallel_target(task, hardware) == 1
    for i in order:
        sch, decisions = _apply_rules(task, hardware, sketches[i].trace, o, serial)
        why = refusing_postproc(sch, task, hardware)
        if why is None:
            return RuleSchedule(sch, i, decisions, time.perf_counter() - t0)
        refused.append(f"sketch {i}: {why}")
    raise ValueError(f"{task.task_name}: no sketch gives a valid program under the rules ({'; '.join(refused)})")


def sketch_order(task: Task, hardware: Hardware, traces: list) -> list[int]:
    """The indices of a design space's sketches (their ``traces``) in the order the rules try them:
    the rfactor sketches last where the reduction is short or prime, then the most tiled loops
    first, a fused consumer before an unfused one. Greedy decoding writes the first live one."""
    short = (k := _longest_reduction(task)) <= 2 * vector_lanes(hardware.vector_bits, "float32") or len(divisors(k)) == 2
    kinds = [[inst.kind.name for inst in trace.insts] for trace in traces]
    return sorted(range(len(traces)), key=lambda i: (short and _rfactors(traces[i]),
                                                     -kinds[i].count("SamplePerfectTile"),
                                                     "ReverseComputeAt" not in kinds[i], i))


def _rfactors(trace: Any) -> bool:
    return any(inst.kind.name == "RFactor" for inst in trace.insts)


def _longest_reduction(task: Task) -> int:
    """The most elements any block of ``task`` reduces into one (0: no reduction). A reduction of
    at most two vectors, or of a prime length, is not split across the cores (MetaSchedule's rfactor
    sketch adds a second pass and parallel region for nothing): on a Rocket Lake the 8 zoo tasks with
    one ran 1.34x unsplit, none slower (ResNet-50's 3x3 max pool 1.7-2.0x), ViT's 197-long softmax
    1.20-1.28x; every other reduction with rows for the cores ran 0.70x unsplit (39 tasks)."""
    from collectors.tir import block_realizes, is_reduction

    func = next(iter(as_module(task.mod).functions.values()))
    return max((math.prod(int(iv.dom.extent) for iv in r.block.iter_vars if is_reduction(iv))
                for r, _ in block_realizes(func.body) if any(is_reduction(iv) for iv in r.block.iter_vars)), default=0)


def rfactor_split(extent: int, max_inner: int) -> list[int]:
    """The factors ``[K / f, f]`` of an rfactor sketch's K-long reduction: ``K / f`` steps of ``f``
    partial results (a vector of them, kept in a buffer), then a second pass adds the ``f`` up.
    Each pass is a chain of dependent steps (each step's partials are the last one's, through
    memory), so ``f`` is the divisor nearest sqrt(K) (up to ``max_inner``; of two as near, the
    larger: fewer, wider steps): the two chains about equal. Measured on a Rocket Lake against the
    largest divisor up to 8 of before, every divisor side by side (``bench.studies.reductions``,
    27 tasks): 1.87x geomean over the 22 single-split tasks it changes: EfficientNet-B0's global
    average pools 11.3-11.8x (3,136: f 56, where 8 took 392 steps), 8.6-9.5x (1,600), 4.7-4.9x
    (784), Whisper's 250-long mask max 2.0x (25); the 400- and 512-long means 0.74-0.91x; BERT's
    and GPT-2's layer norms (two splits of 768: 32) 2.3-3.6x."""
    from fractions import Fraction

    def off(d: int) -> Fraction:  # how far d is from sqrt(K), as a ratio (exact: ties are real)
        return Fraction(max(d * d, extent), min(d * d, extent))

    f = min((d for d in divisors(extent) if d <= max_inner), key=lambda d: (off(d), -d))
    return [extent // f, f]


def _apply_rules(task: Task, hardware: Hardware, trace: Any, o: RuleOptions, serial: bool = False) -> tuple[Any, dict]:
    """Replay a sketch with every decision chosen by rule (``serial``: no parallel loop, the task
    is smaller than what starting one saves); the schedule and the decisions."""
    from tvm.s_tir.schedule import Schedule

    plan = _tile_roles(trace)
    lanes = vector_lanes(hardware.vector_bits, "float32")
    l1 = l1_bytes(hardware)
    sch = Schedule(as_module(task.mod))
    chosen: dict[int, Any] = {}
    state = {"parallel_left": hardware.cores * o.chunks_per_core, "rows": 1, "cols": 1, "group": None, "serial": serial,
             "rfactor": _rfactors(trace)}
    planned, window = _blocked_plans(task, hardware, trace, plan, serial, o) if o.blocked else ({}, False)
    counter = [0]  # the provider is called for every instruction, in trace order

    def provider(inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
        i = counter[0]
        counter[0] += 1
        kind = inst.kind.name
        if kind == "SamplePerfectTile":
            extent = _extent(sch, inputs[0])
            if extent is None:
                return decision
            n, max_inner = int(attrs[0]), int(attrs[1])
            role = plan.get(i, ("other", 0, 0, 0))
            if role[1] != state["group"]:  # a new block's tiles: parallel budget and tile sizes start over
                state.update(group=role[1], parallel_left=hardware.cores * o.chunks_per_core, rows=1, cols=1)
            tiles = planned.get(i)
            if tiles is None or math.prod(tiles) != extent or tiles[-1] > max_inner:
                tiles = _tiles(extent, n, max_inner, role, lanes, l1, state)
            chosen[i] = tiles
            return [int(t) for t in tiles]
        if kind == "SampleCategorical":
            values = [int(v) for v in attrs[0]]
            if window:  # a window plan's scalar outputs: the whole window unrolled (blocking.window_plan)
                pick = values.index(max(values))
            else:
                pick = values.index(o.unroll) if o.unroll in values else len(values) // 2
            chosen[i] = pick
            return pick
        if kind == "SampleComputeLocation" and o.locations == "rule":
            where = compute_location(task, sch, inputs[0])
            if where is not None:
                chosen[i] = where
                return where
        return decision

    trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    return sch, chosen


def compute_location(task: Task, sch: Any, block_rv: Any) -> int | None:
    """The ``SampleComputeLocation`` decision for a producer (a convolution's pad) feeding a
    block the blocked plan covers; None (the sketch's own draw stays) for any other.

    Never inline: the pad's ``if_then_else`` then sits in every load of the convolution's inner
    loops. On the Rocket Lake corpus (22 zoo convolutions with a pad, ~300 records each, best
    record per location against the task's best) inlined pads ran 0.15x (regular convolutions)
    and 0.28x (depthwise), and the rules inherited whatever the design space drew (EfficientNet-B0's
    5x5 depthwise conv2d29: 838 us inlined, 58 us with the same tiles and the pad per channel).
    A regular convolution (its output channels reuse every input row: ``BlockAxes.rows``) takes
    the pad at the root, padded once (0.88x geomean, the best location on 5 of 10; loops inside
    the tiles recompute it per tile of output channels); a depthwise convolution the deepest
    loop over its batch and channel axes with no image loop above it: each channel's plane
    padded just before its window sweeps it, while it is in the L1 (the best on 5 of 8; root 0.45x)."""
    from collectors.tir import block_realizes

    # read from the IR, never through schedule primitives: those would be recorded in the trace,
    # which must stay the sketch's for the language to encode the rules' program
    buffer = sch.get(block_rv).writes[0].source
    current = next(iter(sch.mod.functions.values()))
    consumers = [(r.block, loops) for r, loops in block_realizes(current.body)
                 if any(read.source.same_as(buffer) for read in r.block.reads)]
    if len(consumers) != 1:
        return None
    block, loops = consumers[0]
    name = str(block.name_hint)
    axes = block_axes(task.mod, name)
    if axes is None or not any(axes.reduce):
        return None
    if axes.rows is not None:
        return ROOT
    func = next(iter(as_module(task.mod).functions.values()))
    realize = next(r for r, _ in block_realizes(func.body) if str(r.block.name_hint) == name)
    outer = {str(v.name) for k, v in enumerate(realize.iter_values)  # the loops over batch and channels
             if k < axes.vector - 1 and not axes.reduce[k] and hasattr(v, "name")}
    best = ROOT
    for d, loop in enumerate(loops):  # a decision is the loop's index in the consumer's nest
        if _for_extent(loop) == 1:  # never a location (CollectComputeLocation skips unit loops)
            continue
        if _loop_axis(loop) not in outer:
            break
        if probe_compute_location(sch, block_rv, d) == d:  # legal here
            best = d
    return best


def _loop_axis(loop: Any) -> str:
    """The block iterator a tiled loop came from, by its name (MetaSchedule's splits keep it: ``ff_0``)."""
    return str(loop.loop_var.name).rsplit("_", 1)[0]


def _blocked_plans(task: Task, hardware: Hardware, trace: Any, roles: dict, serial: bool,
                   o: RuleOptions) -> tuple[dict[int, list[int]], bool]:
    """Instruction index -> tiles of every SamplePerfectTile that tiles a block the blocked plan
    covers (a 4-level spatial, 2-level reduction tiling of a block with a contiguous output), and
    whether a block takes the window plan (``blocking.unvectorized``: unrolled all the way)."""
    groups: dict[int, list[int]] = {}
    for i, (role, group, _pos, _n) in roles.items():
        groups.setdefault(group, []).append(i)
    block_of = {}
    for inst in trace.insts:
        if inst.kind.name == "GetSBlock":
            block_of[inst.outputs[0]] = str(inst.attrs[0])
    out: dict[int, list[int]] = {}
    window = False
    for group, samples in groups.items():
        if group < 0 or any(int(trace.insts[i].attrs[0]) not in (2, 4) for i in samples):
            continue
        name = block_of.get(trace.insts[group].inputs[0])
        axes = block_axes(task.mod, name) if name else None
        if axes is None or len(samples) != len(axes.extents):
            continue
        plan = blocked_plan(axes, hardware, min(int(trace.insts[i].attrs[1]) for i in samples), serial, o.blocking,
                            o.planes, o.inner_reduction, o.chunks_per_core)
        window = window or unvectorized(axes, o.blocking)
        loops = {p: i for p, i in zip(range(len(axes.extents)), sorted(samples))}
        for p, i in loops.items():
            want = 4 if not axes.reduce[p] else 2
            if int(trace.insts[i].attrs[0]) == want and p in plan:
                out[i] = plan[p]
    return out, window


def _tile_roles(trace: Any) -> dict[int, tuple[str, int, int, int]]:
    """Instruction index of each SamplePerfectTile -> (role, group, position, count of its kind).

    A group is one ``GetLoops`` (one block's loop nest); role "spatial" for 4-level tiles, "reduce"
    for 2-level ones (MetaSchedule's CPU ``SSRSRS``), positions in loop order.
    """
    position: dict[Any, tuple[int, int]] = {}  # loop RV -> (its GetLoops, index); RVs hash by identity
    for i, inst in enumerate(trace.insts):
        if inst.kind.name == "GetLoops":
            for p, rv in enumerate(inst.outputs):
                position[rv] = (i, p)
    samples = []
    for i, inst in enumerate(trace.insts):
        if inst.kind.name == "SamplePerfectTile":
            group, pos = position.get(inst.inputs[0], (-1, -1))
            n = int(inst.attrs[0])
            samples.append((i, group, pos, "spatial" if n >= 3 else "reduce"))
    roles: dict[int, tuple[str, int, int, int]] = {}
    for i, group, pos, role in samples:
        same = [s for s in samples if s[1] == group and s[3] == role]
        roles[i] = (role, group, same.index((i, group, pos, role)), len(same))
    return roles


def _extent(sch: Any, loop: Any) -> int | None:
    return _for_extent(sch.get(loop))


def _for_extent(loop: Any) -> int | None:
    """A ``For`` loop's extent (None: symbolic)."""
    ext = loop.extent
    return int(ext.value) if hasattr(ext, "value") else None


def _tiles(extent: int, n: int, max_inner: int, role: tuple, lanes: int, l1: int, state: dict) -> list[int]:
    """The rule's factors (outer to inner) of one loop; their product is ``extent``."""
    kind, _group, pos, count = role
    if kind == "spatial" and n == 4:
        if pos == count - 1:  # innermost: the vectorized loop
            ds = [d for d in divisors(extent) if d <= max_inner]
            vec = [d for d in ds if d % lanes == 0 and d <= 2 * lanes]
            t3 = max(vec) if vec else max(d for d in ds if d <= 2 * lanes)
            state["cols"] = t3
        elif pos == count - 2:  # register rows
            t3 = largest_divisor(extent, min(REGISTER_ROWS, max_inner))
            state["rows"] = t3
        else:
            t3 = 1
        rest = extent // t3
        if state.get("serial"):
            return [1, 1, rest, t3]
        t0 = largest_divisor(rest, state["parallel_left"])
        state["parallel_left"] = max(1, state["parallel_left"] // t0)
        t2 = largest_divisor(rest // t0, OUTER_BLOCK) if pos < count - 2 else 1
        return [t0, rest // (t0 * t2), t2, t3]
    if n == 2 and state["rfactor"]:
        return rfactor_split(extent, max_inner)
    if n == 2:  # inner reduction split: the L1 rule
        budget = l1 // 2 // 4 // max(1, state["rows"] + state["cols"])
        k1 = largest_divisor(extent, min(max_inner, INNER_REDUCTION, max(1, budget)))
        return [extent // k1, k1]
    # any other split: innermost gets the largest factor allowed, the rest outermost
    inner = largest_divisor(extent, max_inner)
    return [extent // inner] + [1] * (n - 2) + [inner]
