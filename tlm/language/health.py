"""Healthy decoding on a CPU: tile factors that keep a written program out of the static failure modes.

Why this exists: the model's pools and its held-out greedy programs are mostly in the failure
modes of ``collectors.failure_modes`` (issue 32): the innermost tile of the output's stride-1
axis too short for SIMD (1 or 2, or under one vector, or a ragged multiple), or a register tile
whose accumulators outnumber the vector registers. On the 792 measured pool programs of a Zen 4
those programs ran at 0.06-0.19x MetaSchedule@256 (geomean by mode) against 0.37x for the
others, and MetaSchedule's own best programs are never in them. Both are facts of the hardware
(vector lanes of the output's dtype, the register count) and of the task (which iterator is
stride-1 in the written buffer), so generation can avoid them without a measurement: writing
a sentence with ``healthy`` decoding removes, at each tile factor, the values that would put
the program in one of those modes, whenever some legal value does not. Reading a sentence (a
corpus record, a posted schedule) never applies it: every valid program stays expressible.

The bounds follow MetaSchedule's CPU multi-level tiling of the main block (the block annotated
with ``meta_schedule.tiling_structure``, e.g. ``SSRSRS``), whose tiles split the block's own
loops (taken before any instruction reshaped the nest), so each tile is one block iterator's:

- the stride-1 iterator's innermost factor is a multiple of the lanes (when the iterator's extent
  has such a divisor and an input is contiguous along it; a GEMV is not asked to vectorize);
- the register tile (the spatial factors inside the innermost non-unit reduction level) needs
  at most the registers an accumulator may take (``collectors.hardware.accumulator_registers``:
  12 of AVX2's 16): ``product of the other spatial factors x ceil(axis factor / lanes)``. The
  rule first allowed all 16, and the round-1 student's ranked top-1 on two held-out convolutions
  filled them (8 channels x 2 vectors of a 14-wide row): 0.08-0.09x the teacher.

- the register tile spans at most ``collectors.tir.SHARED_TILE_MAX`` (2) values of
  the iterators every input reads (``reuse``: a batched matmul's head, a depthwise convolution's
  channel; each such value loads its own operands). The shipped Zen 3 model's served top-1 of
  BERT's attention matmuls held all 12 heads there and ran 8-13x slower than MetaSchedule's.

The same rules as the failure modes read from the TIR; a test compares the two on walks.

A third rule, ``parallel``, sizes the parallel loop by the task's work. MetaSchedule's postproc
makes the outermost spatial loops above the first reduction loop one parallel loop (fusing them
until their product passes the ``meta_schedule.parallel`` annotation's value); it leaves the
nest serial only when they are all ones. A parallel region costs ~1.5-2 us to start and join on a
2-core Zen 3 (TVM's pool on the key's cores), more than the whole of a tiny task: on the demo's
small BERT every served schedule with a parallel loop took 1.4-10 us where TVM's default (serial)
lowering took 0.01-2.4 us, and the Zen 3 corpus's best programs are one-core below ~5,000 FLOPs
and parallel above ~20,000. On a large task the opposite: the round-1 student's held-out greedy
programs left the outer tiles at 1 and ran 1-7 ways parallel where the teacher ran 8-224 (6 of
12 convolutions; up to 5.3x slower). From the task's estimated one-core time
(``collectors.threads.parallel_target``): below one region's cost, every tile level above the first reduction
is 1 (one core); above it, those levels multiply to at least ``WAYS_PER_CORE x cores`` and the annotation
lets the postproc fuse that many, whenever some legal value allows.

A fifth rule, ``reread``, keeps a spatial tile out of the parallel loop when each parallel
chunk of a split of it would read again more input than the L2 holds (a matmul's rows, whose
chunks each stream all of B) and another tile, whose chunks read less again, can give the cores
their chunks: its first level is 1, the parallel rule asks the first level of the others for the
cores' chunks, the stride-1 axis included (as ``collectors.blocking._split_order`` orders the
rules' sweep), and where the held tile splits at a later outer level (sequential within a chunk)
the parallel annotation stops the postproc's fusion before that level. Decoded first (Rocket Lake, the
shipped model's greedy programs): the four slowest against the rules' program split the rows of a
matmul whose B outgrows the 2 MB L2: ViT's 197 x 768 x 3072 dense 197 ways (16x slower), BERT's
3072-deep dense 32 ways (6.8x), LLaMA's 128 x 4096 x 4096 training matmul 16 ways (6.3x the
teacher). None of them was in a failure mode above; ``collectors.failure_modes`` reads it from the
TIR now (``restream``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from collectors.threads import task_parallel_target
from collectors.tir import SHARED_TILE_MAX

#: The annotation MetaSchedule's multi-level tiling puts on the block it tiles.
TILING_KEY = "meta_schedule.tiling_structure"

#: the rules healthy decoding applies (module docstring); ``healthy=True`` means all of them
RULES = frozenset({"vector", "registers", "reuse", "parallel", "reread"})
#: a variant a study may name instead of its rule: ``registers-all`` lets the accumulators take
#: every vector register (the ``registers`` rule before 2026-12-05), to judge the two side by side
VARIANTS = frozenset({"registers-all"})


def rules_of(healthy: bool | Sequence[str] | frozenset) -> frozenset:
    """The healthy rules ``healthy`` names: True all (:data:`RULES`), False none, or a subset by
    name (a study switching one rule off); an unknown name is refused."""
    if healthy is True:
        return RULES
    if not healthy:
        return frozenset()
    out = frozenset(healthy)
    if out - RULES - VARIANTS:
        raise ValueError(f"unknown healthy rule(s) {sorted(out - RULES - VARIANTS)}; known: {sorted(RULES | VARIANTS)}")
    return out


@dataclass(frozen=True)
class CpuTiling:
    """How one sketch tiles its main block, for the healthy bounds (module docstring)."""

    structure: str  # the tiling structure, e.g. "SSRSRS": one letter per tile level
    spatial: tuple[int, ...]  # instruction indices of the tiles over spatial iterators
    reduction: tuple[int, ...]  # ... over reduction iterators
    axis: int | None  # the tile over the written buffer's stride-1 iterator
    vectorize: bool  # an input is contiguous along that iterator too: its innermost factor should fill vectors
    lanes: int  # vector lanes of the written dtype
    registers: int  # vector registers the accumulators may take (collectors.hardware.accumulator_registers)
    extents: tuple[int, ...] = ()  # the spatial tiles' loop extents, as ``spatial`` (0: not static)
    parallel: int = 0  # :func:`parallel_target` of the task: 0 none, 1 serial, P at least P ways
    fused_at: int = 0  # the tile level (1-based) a consumer or cache write is computed at (0: none)
    shared: tuple[int, ...] = ()  # the spatial tiles over iterators every input reads (collectors.tir.shared_iterators)
    #: per spatial tile (as ``spatial``): the input bytes that do not depend on its iterator, which
    #: every parallel chunk of a split of it reads again (``collectors.block_axes.BlockAxes.reread``)
    reread: tuple[int, ...] = ()
    cache: int = 0  # bytes of the L2 a core streams the rest of an input from (collectors.blocking.l2_bytes)

    @functools.cached_property
    def restreaming(self) -> frozenset:
        """The spatial tiles that must stay out of the parallel loop (the ``reread`` rule): a split
        of one makes every chunk read again more input than the L2 holds, and another spatial tile,
        whose chunks read less again, is long enough to give the cores their chunks. None on a task
        written serial. Derived once per tiling: every factor decision asks."""
        if not self.reread or self.parallel == 1:
            return frozenset()
        need = max(2, self.parallel)
        return frozenset(
            inst for inst, mine in zip(self.spatial, self.reread)
            if mine > self.cache and any(r < mine and (e or 0) >= need * (self.lanes if s == self.axis else 1)
                                         for s, r, e in zip(self.spatial, self.reread, self.extents) if s != inst))

    def restreams(self, inst: int) -> bool:
        """Whether spatial tile ``inst`` is one of :attr:`restreaming`."""
        return inst in self.restreaming

    @property
    def outer_levels(self) -> int:
        """Spatial tile levels the parallel postproc fuses: those above the first reduction level,
        down to the level where a consumer is computed (a loop whose body holds two statements
        ends the fusion)."""
        above = self.structure.index("R") if "R" in self.structure else self.structure.count("S")
        return min(above, self.fused_at) if self.fused_at else above

    def inner_levels(self, reduction_inner_unit: bool) -> int:
        """How many innermost spatial levels form the register tile: those after the last ``R``
        level, or after the one before it when the last reduction level is all ones."""
        r = [i for i, ch in enumerate(self.structure) if ch == "R"]
        if not r:
            return self.structure.count("S")
        cut = r[-2] if reduction_inner_unit and len(r) > 1 else (-1 if reduction_inner_unit else r[-1])
        return self.structure[cut + 1:].count("S")

    def registers_needed(self, factors: Mapping[int, Sequence[int]], reduction_inner_unit: bool) -> int:
        """Vector registers the register tile of ``factors`` (tile instruction -> its factors, the
        spatial tiles decided so far; an undecided one counts 1) holds as accumulators."""
        return self._register_tile(self.spatial, factors, reduction_inner_unit, vectors=True)

    def shared_needed(self, factors: Mapping[int, Sequence[int]], reduction_inner_unit: bool) -> int:
        """Elements of the register tile of ``factors`` over the iterators every input reads."""
        return self._register_tile(self.shared, factors, reduction_inner_unit, vectors=False)

    def _register_tile(self, tiles: Sequence[int], factors: Mapping[int, Sequence[int]],
                       reduction_inner_unit: bool, *, vectors: bool) -> int:
        levels = self.inner_levels(reduction_inner_unit)
        need = 1
        for inst in tiles:
            f = factors.get(inst)
            if not f:
                continue
            inner = list(f[len(f) - levels:]) if levels else []
            if vectors and inst == self.axis and inner and inner[-1] > 2:  # the stride-1 loop: vectors
                inner[-1] = math.ceil(inner[-1] / self.lanes)
            need *= math.prod(inner)
        return need


def tiling_of(space: Any, sketch: Any) -> CpuTiling | None:
    """:func:`cpu_tiling` of a sketch of ``space`` (a ``tlm.language.space.Space``), kept on the sketch."""
    known = sketch.__dict__.get("_cpu_tiling", False)
    if known is False:
        known = cpu_tiling(sketch, space.task.mod, space.hardware)
        if known is not None:
            from dataclasses import replace

            known = replace(known, parallel=space_parallel_target(space))
        sketch.__dict__["_cpu_tiling"] = known
    return known


def space_parallel_target(space: Any) -> int:
    """``collectors.threads.task_parallel_target`` of the space's task, kept on the space (every
    sketch's tiling and every ``generate`` call on the task ask for it)."""
    known = space.__dict__.get("_parallel_target")
    if known is None:
        known = space.__dict__["_parallel_target"] = task_parallel_target(space.task, space.hardware)
    return known


def cpu_tiling(sketch: Any, mod: Any, hardware: Any) -> CpuTiling | None:
    """The :class:`CpuTiling` of ``sketch`` (a ``tlm.language.space.Sketch`` of ``mod`` on a CPU
    ``hardware``), or None when it tiles no block with a structure whose tiles split the block's
    own loops (elementwise tasks, cross-thread reductions, GPU sketches)."""
    from collectors.block_axes import rereads
    from collectors.blocking import l2_bytes
    from collectors.hardware import accumulator_registers
    from collectors.tir import block_realizes, contiguous_axis, is_reduction, plain_json, shared_iterators, vector_lanes
    from tlm.language.trace_flow import first_reshape, made_by

    if hardware.kind != "cpu" or getattr(sketch, "thread_groups", ()):
        return None
    insts = [x for x in sketch.trace.insts if x.kind.name != "EnterPostproc"]
    reshaped = first_reshape(insts)
    source = made_by(insts)

    block_name = {}  # block RV's instruction -> block name
    structure = {}  # block name -> tiling structure
    for i, x in enumerate(insts):
        if x.kind.name == "GetSBlock":
            block_name[i] = str(plain_json(x.attrs[0]))
        elif x.kind.name == "Annotate" and str(plain_json(x.attrs[0])) == TILING_KEY:
            src = source(x.inputs[0])
            if src is not None and src[0] in block_name:
                structure[block_name[src[0]]] = str(plain_json(x.inputs[1]))
    fused_at = []  # tile levels (1-based) of the Split loops a block is computed at
    for x in insts:
        if x.kind.name in ("ReverseComputeAt", "ComputeAt") and len(x.inputs) > 1:
            loop = source(x.inputs[1])
            if loop is not None and insts[loop[0]].kind.name == "Split":
                fused_at.append(loop[1] + 1)
    tiles: dict[str, list[tuple[int, int]]] = {}  # block -> (tile instruction, loop position)
    for c in sketch.choices:
        if c.kind != "tile":
            continue
        loop = source(insts[c.inst_index].inputs[0])
        if loop is None or insts[loop[0]].kind.name != "GetLoops" or loop[0] > reshaped:
            continue
        blk = source(insts[loop[0]].inputs[0])
        name = block_name.get(blk[0]) if blk is not None else None
        if name in structure:
            tiles.setdefault(name, []).append((c.inst_index, loop[1]))
    if not tiles:
        return None
    name = max(tiles, key=lambda b: len(tiles[b]))
    func = mod["main"] if hasattr(mod, "functions") else mod
    found = next(((r, lp) for r, lp in block_realizes(func.body) if r.block.name_hint == name), None)
    if found is None:
        return None
    realize, loops = found
    block = realize.block
    # the block's loops are its iterators, one each and in order (else a tile is not an iterator's)
    if len(loops) != len(block.iter_vars) or any(not v.same_as(lp.loop_var)
                                                  for v, lp in zip(realize.iter_values, loops)):
        return None
    spatial, reduction, axis, extents, shared, reread = [], [], None, [], [], []
    pos, loaded = contiguous_axis(block)
    read_again = rereads(block, in_bytes=True)
    read_by_all = set(shared_iterators(block))
    extent_of = {c.inst_index: c.extent or 0 for c in sketch.choices if c.kind == "tile"}
    for inst, j in tiles[name]:
        if is_reduction(block.iter_vars[j]):
            reduction.append(inst)
        else:
            spatial.append(inst)
            extents.append(extent_of.get(inst, 0))
            reread.append(read_again[j])
            if j == pos:
                axis = inst
            if j in read_by_all:
                shared.append(inst)
    lanes = vector_lanes(int(hardware.vector_bits), str(block.writes[0].source.dtype))
    return CpuTiling(structure=structure[name], spatial=tuple(spatial), reduction=tuple(reduction), axis=axis,
                     vectorize=bool(loaded), lanes=lanes, registers=accumulator_registers(hardware),
                     extents=tuple(extents), fused_at=min(fused_at, default=0), shared=tuple(shared),
                     reread=tuple(reread), cache=l2_bytes(hardware))


def healthy_factors(tiling: CpuTiling, inst: int, n: int, chosen: Sequence[int], extent: int,
                    done: Mapping[int, Sequence[int]], values: list[int], rules: frozenset = RULES) -> list[int]:
    """Of the legal ``values`` of tile ``inst``'s next factor (``chosen`` before it, ``n`` factors
    over ``extent``; ``done``: the tiles decided before this one), those that keep the program
    healthy by ``rules`` (module docstring); ``values`` itself when none does (a rule never makes
    a valid program impossible)."""
    rest = extent // math.prod(chosen) if chosen else extent
    i = len(chosen)
    if i >= n - 1:  # the last factor is forced
        return values
    out = values
    if "vector" in rules and inst == tiling.axis and tiling.vectorize and extent % tiling.lanes == 0:
        vec = [v for v in out if (rest // v) % tiling.lanes == 0]
        out = vec or out
    held = "reread" in rules and i == 0 < tiling.outer_levels and tiling.restreams(inst)
    if held:  # not split at the first level: the parallel annotation stops the fusion before the others
        out = [v for v in out if v == 1] or out
    elif "parallel" in rules and tiling.parallel and inst in tiling.spatial and i < _parallel_levels(tiling, rules) \
            and (inst != tiling.axis or tiling.parallel == 1 or _axis_splits(tiling, rules)):
        out = _parallel_factors(tiling, inst, chosen, rest, done, out, rules)
    budget = _register_budget(tiling, rules)
    reuse = "reuse" in rules and bool(tiling.shared)
    if i != n - 2 or (budget is None and not reuse):
        return out

    def within(factors: Mapping[int, Sequence[int]], unit: bool) -> bool:
        return (budget is None or tiling.registers_needed(factors, unit) <= budget) and \
            (not reuse or tiling.shared_needed(factors, unit) <= SHARED_TILE_MAX)

    if inst in tiling.spatial:
        # the innermost factor is fixed now: bound the register tile, every later tile counted as 1
        def fits(v: int) -> bool:
            return within({**done, inst: [*chosen, v, rest // v]}, False)
    elif inst in tiling.reduction and tiling.reduction[-1] == inst and all(s in done for s in tiling.spatial) \
            and all(done[r][-1] == 1 for r in tiling.reduction[:-1] if r in done):
        # the last reduction tile: an innermost level of ones widens the register tile
        wide = within(done, True)

        def fits(v: int) -> bool:
            return rest // v != 1 or wide
    else:
        return out
    kept = [v for v in out if fits(v)]
    return kept or out


def _register_budget(tiling: CpuTiling, rules: frozenset) -> int | None:
    """Accumulators the register tile may hold under ``rules`` (None: no register rule)."""
    from collectors.hardware import OPERAND_REGISTERS

    if "registers" in rules:
        return tiling.registers
    return tiling.registers + OPERAND_REGISTERS if "registers-all" in rules else None


def _parallel_levels(tiling: CpuTiling, rules: frozenset) -> int:
    """The spatial tile levels the parallel rule counts on: the outer ones, or the first alone
    where the ``reread`` rule holds a tile (its later outer levels may split, sequentially within a
    chunk, and :func:`parallel_values` keeps the postproc's fusion out of them)."""
    if "reread" in rules and tiling.restreaming:
        return min(1, tiling.outer_levels)
    return tiling.outer_levels


def _axis_splits(tiling: CpuTiling, rules: frozenset) -> bool:
    """Whether the stride-1 axis is asked to split for the cores after all: the ``reread`` rule
    holds another spatial tile out of the parallel levels (a matmul whose B outgrows the L2 is
    split over its columns, as the rules' sweep splits it: ``collectors.blocking._split_order``)."""
    return "reread" in rules and bool(tiling.restreaming - {tiling.axis})


def _parallel_factors(tiling: CpuTiling, inst: int, chosen: Sequence[int], rest: int,
                      done: Mapping[int, Sequence[int]], values: list[int], rules: frozenset = RULES) -> list[int]:
    """The ``parallel`` rule on an outer-level factor of a spatial tile: 1 for a serial task; for a
    parallel one, the values after which the outer levels can still multiply to the target (the
    later outer levels of this tile taking what is left, the undecided tiles their whole extent).
    The stride-1 axis is never asked to split for the cores: moving its loop out took the
    vector loop of a 7-wide NCHW row (a 1x1 convolution 0.46x -> 0.12x the teacher)."""
    if tiling.parallel == 1:
        return [v for v in values if v == 1] or values
    levels = _parallel_levels(tiling, rules)
    have = math.prod(math.prod(done[s][:levels]) for s in tiling.spatial if s in done and s != inst)
    have *= math.prod(chosen)
    axis_splits = _axis_splits(tiling, rules)
    later = math.prod(e or 1 for s, e in zip(tiling.spatial, tiling.extents)
                      if s not in done and s != inst and (s != tiling.axis or axis_splits)
                      and not ("reread" in rules and tiling.restreams(s)))
    more_here = len(chosen) + 1 < levels

    def reach(v: int) -> int:
        return have * v * (rest // v if more_here else 1) * later

    kept = [v for v in values if reach(v) >= tiling.parallel]
    return kept or values


def parallel_values(tiling: CpuTiling | None, values: list[int], rules: frozenset = RULES,
                    done: Mapping[int, Sequence[int]] | None = None) -> list[int]:
    """The ``parallel`` rule on the ``meta_schedule.parallel`` annotation's value: the postproc
    fuses outer loops until their product passes it, so a value under the target can stop the
    fusion early; values below ``target - 1`` go (never all of them). With the ``reread`` rule and
    the tiles decided (``done``): where a held tile splits at a later outer level, values under the
    first level's product, so that the fusion stops before it (ResNet-50's 1x1 ``conv2d5`` keeps its
    teacher's 8 output-channel blocks inside each of 56 row chunks)."""
    if tiling is None or "parallel" not in rules or tiling.parallel < 2:
        return values
    out = [v for v in values if v >= tiling.parallel - 1] or values
    if "reread" in rules and done and any(tiling.restreams(s) and math.prod(done[s][1:tiling.outer_levels]) > 1
                                          for s in tiling.spatial if s in done):
        first = math.prod(done[s][0] for s in tiling.spatial if s in done)
        out = [v for v in out if v < first] or out
    return out


#: instructions that take a block out of the root's loop nests, and that add one
_MOVED = ("ComputeInline", "ReverseComputeInline", "ComputeAt", "ReverseComputeAt")
_ADDED = ("CacheWrite", "CacheRead", "ReIndex", "RFactor")


def root_nests(sketch: Any, mod: Any) -> int:
    """How many loop nests a sketch's program has under the root block, each of which
    MetaSchedule's postproc parallelizes on its own: the module's blocks plus those the sketch
    adds (cache writes and reads, rfactor), less those it inlines or computes at another's loop."""
    from tlm.language.space import sblocks

    known = sketch.__dict__.get("_root_nests")
    if known is None:
        blocks = sum(1 for b in sblocks(mod) if str(b.name_hint) != "root")
        for x in sketch.trace.insts:
            name = x.kind.name
            blocks += (name in _ADDED) - (name in _MOVED)
        known = sketch.__dict__["_root_nests"] = blocks
    return known


def serial_sketches(space: Any, sketches: Sequence[Any]) -> list:
    """The ``parallel`` rule on a task written serial: of ``sketches``, those whose program is one
    loop nest (a second one at the root, an unfused epilogue say, is a parallel region of its own
    whatever the tiles are: 4.1 us against 0.9 us for the default lowering of the demo BERT's
    8x32x32 matmul + add); all of them when none is, or when the task is not serial."""
    if not sketches or space_parallel_target(space) != 1:
        return list(sketches)
    return [sk for sk in sketches if root_nests(sk, space.task.mod) == 1] or list(sketches)
