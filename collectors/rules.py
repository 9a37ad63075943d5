"""A Roller-style rule scheduler for CPUs: the fast, measurement-free baseline.

TVM's dlight has no CPU rule for matmul or conv2d (it leaves a 512^3 matmul at ~300 ms
against ~2.4 ms tuned), so this module writes one, in the spirit of Roller: take the sketch
MetaSchedule would tune (its multi-level tiling ``SSRSRS`` on CPUs) and choose every decision
from the hardware alone, never measuring:

* **register tile** (innermost spatial level): the innermost spatial loop gets a multiple of
  the vector lanes (``vector_bits / 32``; it is the loop the postprocessor vectorizes) up to
  two vectors, the next one up to 8 rows, so the accumulators fit the register file;
* **L1 tile**: the inner reduction factor is the largest divisor up to 8 that keeps the A and
  B tiles of one inner step within half the L1 data cache (rows + columns times ``k1``
  floats); outer spatial loops get an L1-level block of up to 32;
* **parallel outer loops**: the outermost spatial level is split over the outer loops until
  it offers about 8 chunks per core (load balance without tiny tasks); the level between takes
  what is left (the L2 block);
* **unroll**: ``max_step`` 64 where the sketch samples one (MetaSchedule's middle choice);
* compute locations stay as the sketch placed them; reductions without tiling keep the
  sketch's decisions but its tile rule for any split.

The sketch chosen is the one that tiles the most loops (multi-level tiling over the plain
parallel-vectorize sketch), then one that fuses a consumer into the tile (``ReverseComputeAt``); every candidate program goes through the target's postprocessors
(:func:`collectors.sketches.refusing_postproc`), and a sketch whose rule-chosen program is
refused gives way to the next. On CUDA, use ``tvm.s_tir.dlight`` instead (not done here).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from collectors.hardware import Hardware
from collectors.sketches import design_space, refusing_postproc
from collectors.tasks import Task
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


@dataclass
class RuleSchedule:
    """The rule scheduler's program for one task."""

    schedule: Any  # the postprocessed tvm.s_tir.schedule.Schedule
    sketch_index: int  # which sketch of the design space
    decisions: dict = field(default_factory=dict)  # instruction index -> decision chosen by rule
    schedule_s: float = 0.0  # time to choose and check it (the "compile time" of the baseline)


def l1_bytes(hardware: Hardware) -> int:
    """L1 data cache of the host (sysfs), or the default for a hardware that is not this host."""
    path = "/sys/devices/system/cpu/cpu0/cache/index0/size"
    try:
        if hardware.kind == "cpu" and os.path.exists(path):
            text = open(path).read().strip().upper()
            return int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text)
    except (OSError, ValueError):
        pass
    return DEFAULT_L1_BYTES


def rule_schedule(task: Task, hardware: Hardware) -> RuleSchedule:
    """The rule-chosen, postprocessed schedule of ``task`` for a CPU ``hardware``.

    Raises ``ValueError`` for a CUDA hardware (dlight's job) and when no sketch yields a
    program every postprocessor accepts.
    """
    if hardware.kind != "cpu":
        raise ValueError(f"the rule scheduler is for CPUs; {hardware.key} is {hardware.kind} (use tvm.s_tir.dlight)")
    t0 = time.perf_counter()
    sketches = design_space(as_module(task.mod), hardware)
    order = sorted(range(len(sketches)), key=lambda i: (-_tiled_loops(sketches[i].trace),
                                                         not _fuses_consumer(sketches[i].trace), i))
    refused = []
    for i in order:
        sch, decisions = _apply_rules(task, hardware, sketches[i].trace)
        why = refusing_postproc(sch, task, hardware)
        if why is None:
            return RuleSchedule(sch, i, decisions, time.perf_counter() - t0)
        refused.append(f"sketch {i}: {why}")
    raise ValueError(f"{task.task_name}: no sketch gives a valid program under the rules ({'; '.join(refused)})")


def _tiled_loops(trace: Any) -> int:
    return sum(1 for inst in trace.insts if inst.kind.name == "SamplePerfectTile")


def _fuses_consumer(trace: Any) -> bool:
    return any(inst.kind.name == "ReverseComputeAt" for inst in trace.insts)


def _apply_rules(task: Task, hardware: Hardware, trace: Any) -> tuple[Any, dict]:
    """Replay a sketch with every decision chosen by rule; the schedule and the decisions."""
    from tvm.s_tir.schedule import Schedule

    plan = _tile_roles(trace)
    lanes = max(1, hardware.vector_bits // 32)
    l1 = l1_bytes(hardware)
    sch = Schedule(as_module(task.mod))
    chosen: dict[int, Any] = {}
    state = {"parallel_left": hardware.cores * CHUNKS_PER_CORE, "rows": 1, "cols": 1, "group": None}
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
