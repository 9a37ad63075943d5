"""A rule scheduler for CPUs: the fast, measurement-free baseline, blocked as BLIS blocks GEMM.

TVM's dlight has no CPU rule for matmul or conv2d (it leaves a 512^3 matmul at ~300 ms
against ~2.4 ms tuned), so this module writes one: take the sketch MetaSchedule would tune
(its multi-level tiling ``SSRSRS`` on CPUs: spatial levels S0 S1 S2 S3, reduction levels R0 R1,
nested S0 S1 R0 S2 R1 S3) and choose every decision from the hardware alone, never measuring.

**The blocked plan** (BLIS-style; every block whose output has a contiguous axis):

* **micro-kernel** (S3): ``MR`` rows x ``NR`` columns of accumulators (:func:`micro_kernel`):
  the columns on the output's stride-1 axis (a power-of-two number of vectors), the rows on
  the axis the vector-loaded input does not depend on (a matmul's ``i``, a convolution's output
  channel), so each loaded vector is reused ``MR`` times; within half the vector registers;
* **inner reduction** (R1): as deep as keeps both micro-panels within half the L1, at most
  :data:`INNER_REDUCTION` (the unpacked input's rows share an L1 set);
* **where the reuse lives** (:func:`panel_fits`): S2 sits inside the outer reduction step R0,
  so whatever it holds is swept once per step. Where the B micro-panel of the whole reduction
  fits the L1 (BERT's attention matmuls, 1x1 convolutions with a short reduction or a small
  image), the **panel** plan: S2 = 1 (each micro-tile keeps its accumulators over the whole
  reduction), the rows of micro-tiles innermost in S1 so they all reuse that panel from the L1.
  Elsewhere (the dense matmuls of BERT and ViT, K 768-3072) the **sweep** plan: S2 holds the L2
  block, columns of micro-tiles whose input panels share half the L2, rows a quarter;
* **parallel outer loops** (S0): about 8 chunks per core (load balance without tiny tasks):
  the sweep splits first the loops whose chunks read the least input again (:func:`_split_order`),
  the panel plan the blocks of columns and the other axes; a task whose work is less than starting
  a parallel region saves (``collectors.threads.parallel_target``) keeps S0 at 1: no parallel loop;
* **unroll**: ``max_step`` 64 where the sketch samples one (MetaSchedule's middle choice).

Measured on a 2-core Zen 3 against the Roller-style tiles it replaces (bench/studies/rules.py):
1.04-1.35x on BERT-base's matmuls, 4.7x on MobileNetV2's classifier, 0.94-1.20x on ResNet-50
convolutions; the panel plan where it fits against the sweep everywhere (2026-12-05, the 20
quality tasks and 4 training convolutions, ``bench.studies.rules --quality 20``): 0.79x -> 0.88x
MS@256 geomean. Blocks the plan does not cover (no contiguous output axis, other tilings) keep the
Roller-style tiles (``blocked=False`` gives them everywhere): the innermost spatial loop a
multiple of the vector lanes up to two vectors, the next up to 8 rows, the inner reduction the
largest divisor up to 8 within half the L1, outer blocks of up to 32.

The sketch chosen is the one that tiles the most loops (multi-level tiling over the plain
parallel-vectorize sketch), then one that fuses a consumer into the tile (``ReverseComputeAt``);
every candidate program goes through the target's postprocessors
(:func:`collectors.sketches.refusing_postproc`), and a sketch whose rule-chosen program is
refused gives way to the next. The rules' program is also a candidate in every ranked pool of
the generator (``tlm.service.generator.rule_rows``). On CUDA, use ``tvm.s_tir.dlight`` instead.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from collectors.hardware import Hardware
from collectors.sketches import design_space, refusing_postproc
from collectors.tasks import Task
from collectors.threads import task_parallel_target
from collectors.tir import as_module

log = logging.getLogger(__name__)

#: Parallel chunks per core the outer spatial level aims for.
CHUNKS_PER_CORE = 8
#: Register-tile rows (second-innermost spatial loop).
REGISTER_ROWS = 8
#: Largest inner reduction factor (the L1 rule may choose less).
INNER_REDUCTION = 8
#: Largest middle-level (L1 block) factor of an outer spatial loop.
OUTER_BLOCK = 32
#: Unroll ``max_step`` chosen where a sketch samples one.
UNROLL_STEP = 64
#: Used when the host's caches cannot be read (or the hardware is not this host).
DEFAULT_L1_BYTES = 32 * 1024
DEFAULT_L2_BYTES = 512 * 1024


@dataclass
class RuleSchedule:
    """The rule scheduler's program for one task."""

    schedule: Any  # the postprocessed tvm.s_tir.schedule.Schedule
    sketch_index: int  # which sketch of the design space
    decisions: dict = field(default_factory=dict)  # instruction index -> decision chosen by rule
    schedule_s: float = 0.0  # time to choose and check it (the "compile time" of the baseline)


def _cache_bytes(hardware: Hardware, index: int, default: int) -> int:
    path = f"/sys/devices/system/cpu/cpu0/cache/index{index}/size"
    try:
        if hardware.kind == "cpu" and os.path.exists(path):
            text = open(path).read().strip().upper()
            return int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text)
    except (OSError, ValueError):
        pass
    return default


def l1_bytes(hardware: Hardware) -> int:
    """L1 data cache of the host (sysfs), or the default for a hardware that is not this host."""
    return _cache_bytes(hardware, 0, DEFAULT_L1_BYTES)


def l2_bytes(hardware: Hardware) -> int:
    """L2 cache of the host (sysfs index2), or the default for a hardware that is not this host."""
    return _cache_bytes(hardware, 2, DEFAULT_L2_BYTES)


def rule_schedule(task: Task, hardware: Hardware, *, blocked: bool = True, blocking: str = "auto") -> RuleSchedule:
    """The rule-chosen, postprocessed schedule of ``task`` for a CPU ``hardware``.

    ``blocked=False``: the Roller-style tiles alone (the rule baseline before the blocked plan,
    kept to measure one against the other: bench/studies/rules.py); ``blocking``: which blocked
    plan (:data:`PLANS`). Raises ``ValueError`` for a
    CUDA hardware (dlight's job) and when no sketch yields a program every postprocessor accepts.
    """
    if hardware.kind != "cpu":
        raise ValueError(f"the rule scheduler is for CPUs; {hardware.key} is {hardware.kind} (use tvm.s_tir.dlight)")
    if blocking not in PLANS:
        raise ValueError(f"unknown blocked plan {blocking!r}; one of {', '.join(PLANS)}")
    t0 = time.perf_counter()
    sketches = design_space(as_module(task.mod), hardware)
    order = sorted(range(len(sketches)), key=lambda i: (-_tiled_loops(sketches[i].trace),
                                                         not _fuses_consumer(sketches[i].trace), i))
    refused = []
    serial = task_parallel_target(task, hardware) == 1
    for i in order:
        sch, decisions = _apply_rules(task, hardware, sketches[i].trace, blocked, serial, blocking)
        why = refusing_postproc(sch, task, hardware)
        if why is None:
            return RuleSchedule(sch, i, decisions, time.perf_counter() - t0)
        refused.append(f"sketch {i}: {why}")
    raise ValueError(f"{task.task_name}: no sketch gives a valid program under the rules ({'; '.join(refused)})")


def _tiled_loops(trace: Any) -> int:
    return sum(1 for inst in trace.insts if inst.kind.name == "SamplePerfectTile")


def _fuses_consumer(trace: Any) -> bool:
    return any(inst.kind.name == "ReverseComputeAt" for inst in trace.insts)


def _apply_rules(task: Task, hardware: Hardware, trace: Any, blocked: bool = True,
                 serial: bool = False, blocking: str = "auto") -> tuple[Any, dict]:
    """Replay a sketch with every decision chosen by rule (``serial``: no parallel loop, the task
    is smaller than what starting one saves); the schedule and the decisions."""
    from tvm.s_tir.schedule import Schedule

    plan = _tile_roles(trace)
    lanes = max(1, hardware.vector_bits // 32)
    l1 = l1_bytes(hardware)
    sch = Schedule(as_module(task.mod))
    chosen: dict[int, Any] = {}
    state = {"parallel_left": hardware.cores * CHUNKS_PER_CORE, "rows": 1, "cols": 1, "group": None, "serial": serial}
    planned = _blocked_plans(task, hardware, trace, plan, serial, blocking) if blocked else {}
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
                state.update(group=role[1], parallel_left=hardware.cores * CHUNKS_PER_CORE, rows=1, cols=1)
            tiles = planned.get(i)
            if tiles is None or math.prod(tiles) != extent or tiles[-1] > max_inner:
                tiles = _tiles(extent, n, max_inner, role, lanes, l1, state)
            chosen[i] = tiles
            return [int(t) for t in tiles]
        if kind == "SampleCategorical":
            values = [int(v) for v in attrs[0]]
            pick = values.index(UNROLL_STEP) if UNROLL_STEP in values else len(values) // 2
            chosen[i] = pick
            return pick
        return decision

    trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    return sch, chosen


@dataclass(frozen=True)
class BlockAxes:
    """What the blocked (BLIS-style) plan needs of a block: its loops' extents and kinds in order,
    which spatial loop is the output's contiguous axis, and which one reuses the vector loads."""

    extents: tuple[int, ...]
    reduce: tuple[bool, ...]
    vector: int  # loop index of the output's stride-1 axis
    rows: int | None  # loop index of the axis the vector-loaded input does not depend on (None: none)
    #: per loop, the elements of the inputs that do not depend on it: what every parallel chunk of
    #: a split of that loop reads again (a matmul's ``i``: all of B; its ``j``: all of A)
    reread: tuple[int, ...] = ()


def block_axes(mod: Any, block_name: str) -> BlockAxes | None:
    """The :class:`BlockAxes` of ``block_name`` in an unscheduled module (None: not a plain
    loop nest over its iterators, or no contiguous output axis)."""
    import tvm
    from tvm.tirx.analysis import undefined_vars

    from collectors.tir import block_realizes, contiguous_axis, is_reduction

    func = next(iter(as_module(mod).functions.values()))
    found = next((r for r, _ in block_realizes(func.body) if str(r.block.name_hint) == block_name), None)
    if found is None:
        return None
    vec, loaded = contiguous_axis(found.block)
    if vec is None:
        return None
    ivs = list(found.block.iter_vars)
    used = set()  # what the inputs loaded as vectors depend on
    for r in loaded:
        for rng in r.region:
            used |= set(undefined_vars(rng.min))
    reduce = tuple(is_reduction(iv) for iv in ivs)
    extents = tuple(int(iv.dom.extent) for iv in ivs)
    rows = [i for i, iv in enumerate(ivs) if not reduce[i] and i != vec and iv.var not in used and extents[i] > 1]
    write = found.block.writes[0].source
    reread = [0] * len(ivs)
    for r in found.block.reads:
        if r.source.same_as(write):
            continue
        depends = set()
        for rng in r.region:
            depends |= set(undefined_vars(rng.min))
        shape = [d for d in r.source.shape if isinstance(d, tvm.tirx.IntImm)]  # symbolic: not weighed
        size = math.prod(int(d) for d in shape) if len(shape) == len(r.source.shape) else 0
        for i, iv in enumerate(ivs):
            if iv.var not in depends:
                reread[i] += size
    return BlockAxes(extents, reduce, vec, max(rows, key=lambda i: (extents[i], i)) if rows else None, tuple(reread))


def micro_kernel(rows_extent: int, cols_extent: int, lanes: int, registers: int,
                 partial_vectors: int = 2) -> tuple[int, int]:
    """The register tile ``(MR, NR)`` of a BLIS-style micro-kernel: ``MR`` rows of ``nv = NR /
    lanes`` vectors of accumulators. Measured on a Zen 3 (a 128x768x768 matmul, 20 tiles side by
    side): ``nv`` a power of two (a 3-vector row ran 2-10x slower) and the accumulators within
    half the register file (4x16 and 2x32 fastest, 6x16 and 8x16 1.3-1.5x slower: LLVM needs the
    other half for the loaded vectors, broadcasts and addresses). Among those, the most FMAs per
    value loaded (``MR * nv / (MR + nv)``), then the wider row. Both are divisors of their axes (a
    perfect tiling); an axis with no multiple of the lanes among its divisors gets its largest
    divisor up to ``partial_vectors`` vectors (the panel plan asks for one: :func:`_blocked_plan`)."""
    cols = [d for d in _divisors(cols_extent) if d % lanes == 0 and (d // lanes) in (1, 2, 4)] or [
        _largest_divisor(cols_extent, partial_vectors * lanes)]
    best, best_key = (1, cols[0]), (-1.0, 0)
    for nr in cols:
        nv = -(-nr // lanes)
        for mr in _divisors(rows_extent):
            if mr * nv > registers // 2:
                continue
            key = (mr * nv / (mr + nv), nr)
            if key > best_key:
                best, best_key = (mr, nr), key
    return best


#: The blocked plans (``rule_schedule(blocking=...)``; bench/studies/rules.py measures them side by side):
#: "sweep" puts the L2 block in S2, "panel" puts S2 = 1 and the rows innermost of S1, "auto"
#: (the default) takes the panel plan where it fits (:func:`panel_fits`), else the sweep.
PLANS = ("auto", "sweep", "panel")


def panel_fits(k_total: int, nr: int, l1: int) -> bool:
    """Whether a block takes the panel plan: the micro-kernel writes vectors (``nr`` > 1) and the
    B micro-panel of the whole reduction (K x nr floats) fits the L1, so every row of micro-tiles
    reuses it from there. Measured on a Zen 3 (2026-12-05, the 20 quality tasks against
    MS@256): the panel plan 1.4-1.8x the sweep on BERT's attention matmuls (K 64 and 128) and
    MobileNetV2's 1x1 convolutions with a short reduction or a 7x7 image; 0.2-0.6x it on the
    dense matmuls of K 768-3072, whose unpacked B panels no cache holds."""
    return nr > 1 and 4 * k_total * nr <= l1


def _blocked_plan(axes: BlockAxes, hardware: Hardware, max_inner: int = 64, serial: bool = False,
                  plan_kind: str = "auto") -> dict[int, list[int]]:
    """Loop index -> tile factors (outer to inner) of the blocked plan (``plan_kind`` one of
    :data:`PLANS`; the module docstring says what each level holds). The nest is MetaSchedule's
    S0 S1 R0 S2 R1 S3: S2 is swept once per step of the outer reduction R0, S1 and S0 once in all.

    * the inner reduction R1 at most :data:`INNER_REDUCTION` (B is not packed: its kc rows, a row
      stride apart, often a multiple of 4 KB, share one L1 set; kc 64 ran 1.2-10x slower than
      8-16 on the Zen 3, kc as deep as the rows' distinct L1 sets allow 0.88x kc <= 8);
    * **panel**: a row that is not a whole number of vectors is one partial vector (8 x 7 on a
      14-wide image, not 4 x 14: 1.3-1.9x faster on MobileNetV2's 14x14 convolutions);
    * ``serial``: nothing parallel: S0 and S1 1 (the postprocessor fuses the outer spatial
      loops into the parallel one), everything in S2.
    """
    from collectors.hardware import vector_registers

    lanes = max(1, hardware.vector_bits // 32)
    regs = vector_registers(hardware)
    rows_ext = axes.extents[axes.rows] if axes.rows is not None else 1
    mr, nr = micro_kernel(rows_ext, axes.extents[axes.vector], lanes, regs)
    k_total = math.prod(e for e, r in zip(axes.extents, axes.reduce) if r)
    l1 = l1_bytes(hardware)
    # a reduction with no divisor up to INNER_REDUCTION (ViT's 197 tokens) leaves the sweep one
    # step deep (kc = 1): it re-sweeps its block K times; the panel plan ran 2.8x it (Rocket Lake)
    unsplittable = all(_largest_divisor(e, INNER_REDUCTION) == 1 for e, r in zip(axes.extents, axes.reduce) if r)
    panel = plan_kind == "panel" or (plan_kind == "auto" and (panel_fits(k_total, nr, l1) or (nr > 1 and unsplittable)))
    if panel:  # a row that is not whole vectors: one partial vector, as many rows as registers allow
        mr, nr = micro_kernel(rows_ext, axes.extents[axes.vector], lanes, regs, partial_vectors=1)
    inner = {i: 1 for i, r in enumerate(axes.reduce) if not r}
    inner[axes.vector] = nr
    if axes.rows is not None:
        inner[axes.rows] = mr
    plan: dict[int, list[int]] = {}
    k_left = max(1, min(INNER_REDUCTION, l1 // 2 // (4 * (mr + nr))))
    kc = 1
    for i in reversed(range(len(axes.extents))):
        if axes.reduce[i]:
            k1 = _largest_divisor(axes.extents[i], min(k_left, max_inner))
            k_left = max(1, k_left // k1)
            kc *= k1
            plan[i] = [axes.extents[i] // k1, k1]
    spatial = [i for i, r in enumerate(axes.reduce) if not r]
    if serial:
        for i in spatial:
            rest = axes.extents[i] // inner[i]
            plan[i] = [1, 1, rest, inner[i]]  # S0 and S1 would be fused into a parallel loop
        return plan
    l2 = l2_bytes(hardware)
    chunks_wanted = hardware.cores * CHUNKS_PER_CORE
    if panel:
        chunks = 1
        for i in spatial:
            if i == axes.rows:
                continue
            rest = axes.extents[i] // inner[i]
            t1 = _largest_divisor(rest, max(1, l2 // 2 // (4 * k_total * nr))) if i == axes.vector else 1
            plan[i] = [rest // t1, t1, 1, inner[i]]
            chunks *= rest // t1
        if axes.rows is not None:
            rest = axes.extents[axes.rows] // mr
            t0 = _largest_divisor(rest, max(1, chunks_wanted // chunks))
            plan[axes.rows] = [t0, rest // t0, 1, mr]
        return plan
    parallel_left = chunks_wanted
    for i in _split_order(axes, spatial):
        rest = axes.extents[i] // inner[i]
        t0 = _largest_divisor(rest, parallel_left)
        parallel_left = max(1, parallel_left // t0)
        rest //= t0
        if i == axes.vector:  # columns of micro-tiles whose B panels (kc x nr each) share half the L2
            t2 = _largest_divisor(rest, max(1, l2 // 2 // (4 * kc * nr)))
        elif i == axes.rows:  # rows of micro-tiles whose A panels (mr x kc each) share a quarter of it
            t2 = _largest_divisor(rest, max(1, l2 // 4 // (4 * kc * mr)))
        else:
            t2 = 1
        plan[i] = [t0, rest // t2, t2, inner[i]]
    return plan


def _split_order(axes: BlockAxes, spatial: list[int]) -> list[int]:
    """The order the sweep splits the spatial loops over the cores in: first those whose chunks
    read the least again (:attr:`BlockAxes.reread`), ties outermost first. A matmul whose B is the
    larger input (BERT's dense layers) is split over its columns: each core streams its own part
    of B. 1.17-1.73x the rows first on BERT-base's dense matmuls (Rocket Lake, 2026-12-05)."""
    if not axes.reread:
        return list(spatial)
    return sorted(spatial, key=lambda i: (axes.reread[i], spatial.index(i)))


def _blocked_plans(task: Task, hardware: Hardware, trace: Any, roles: dict, serial: bool = False,
                   blocking: str = "auto") -> dict[int, list[int]]:
    """Instruction index -> tiles of every SamplePerfectTile that tiles a block the blocked plan
    covers (a 4-level spatial, 2-level reduction tiling of a block with a contiguous output)."""
    groups: dict[int, list[int]] = {}
    for i, (role, group, _pos, _n) in roles.items():
        groups.setdefault(group, []).append(i)
    block_of = {}
    for inst in trace.insts:
        if inst.kind.name == "GetSBlock":
            block_of[inst.outputs[0]] = str(inst.attrs[0])
    out: dict[int, list[int]] = {}
    for group, samples in groups.items():
        if group < 0 or any(int(trace.insts[i].attrs[0]) not in (2, 4) for i in samples):
            continue
        name = block_of.get(trace.insts[group].inputs[0])
        axes = block_axes(task.mod, name) if name else None
        if axes is None or len(samples) != len(axes.extents):
            continue
        plan = _blocked_plan(axes, hardware, min(int(trace.insts[i].attrs[1]) for i in samples), serial, blocking)
        loops = {p: i for p, i in zip(range(len(axes.extents)), sorted(samples))}
        for p, i in loops.items():
            want = 4 if not axes.reduce[p] else 2
            if int(trace.insts[i].attrs[0]) == want and p in plan:
                out[i] = plan[p]
    return out


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
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in _divisors(n) if d <= max(1, at_most))


def _tiles(extent: int, n: int, max_inner: int, role: tuple, lanes: int, l1: int, state: dict) -> list[int]:
    """The rule's factors (outer to inner) of one loop; their product is ``extent``."""
    kind, _group, pos, count = role
    if kind == "spatial" and n == 4:
        if pos == count - 1:  # innermost: the vectorized loop
            ds = [d for d in _divisors(extent) if d <= max_inner]
            vec = [d for d in ds if d % lanes == 0 and d <= 2 * lanes]
            t3 = max(vec) if vec else max(d for d in ds if d <= 2 * lanes)
            state["cols"] = t3
        elif pos == count - 2:  # register rows
            t3 = _largest_divisor(extent, min(REGISTER_ROWS, max_inner))
            state["rows"] = t3
        else:
            t3 = 1
        rest = extent // t3
        if state.get("serial"):
            return [1, 1, rest, t3]
        t0 = _largest_divisor(rest, state["parallel_left"])
        state["parallel_left"] = max(1, state["parallel_left"] // t0)
        t2 = _largest_divisor(rest // t0, OUTER_BLOCK) if pos < count - 2 else 1
        return [t0, rest // (t0 * t2), t2, t3]
    if n == 2:  # inner reduction (or rfactor) split: the L1 rule
        budget = l1 // 2 // 4 // max(1, state["rows"] + state["cols"])
        k1 = _largest_divisor(extent, min(max_inner, INNER_REDUCTION, max(1, budget)))
        return [extent // k1, k1]
    # any other split: innermost gets the largest factor allowed, the rest outermost
    inner = _largest_divisor(extent, max_inner)
    return [extent // inner] + [1] * (n - 2) + [inner]
