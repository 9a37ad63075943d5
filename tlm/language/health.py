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
  at most the registers: ``product of the other spatial factors x ceil(axis factor / lanes)``.

The same two rules as the failure modes read from the TIR; a test compares the two on walks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: The annotation MetaSchedule's multi-level tiling puts on the block it tiles.
TILING_KEY = "meta_schedule.tiling_structure"


@dataclass(frozen=True)
class CpuTiling:
    """How one sketch tiles its main block, for the healthy bounds (module docstring)."""

    structure: str  # the tiling structure, e.g. "SSRSRS": one letter per tile level
    spatial: tuple[int, ...]  # instruction indices of the tiles over spatial iterators
    reduction: tuple[int, ...]  # ... over reduction iterators
    axis: int | None  # the tile over the written buffer's stride-1 iterator
    vectorize: bool  # an input is contiguous along that iterator too: its innermost factor should fill vectors
    lanes: int  # vector lanes of the written dtype
    registers: int  # vector registers of the target

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
        levels = self.inner_levels(reduction_inner_unit)
        need = 1
        for inst in self.spatial:
            f = factors.get(inst)
            if not f:
                continue
            inner = list(f[len(f) - levels:]) if levels else []
            if inst == self.axis and inner and inner[-1] > 2:  # the stride-1 loop: vectors, not elements
                inner[-1] = math.ceil(inner[-1] / self.lanes)
            need *= math.prod(inner)
        return need


def tiling_of(space: Any, sketch: Any) -> CpuTiling | None:
    """:func:`cpu_tiling` of a sketch of ``space`` (a ``tlm.language.space.Space``), kept on the sketch."""
    known = sketch.__dict__.get("_cpu_tiling", False)
    if known is False:
        known = sketch.__dict__["_cpu_tiling"] = cpu_tiling(sketch, space.task.mod, space.hardware)
    return known


def cpu_tiling(sketch: Any, mod: Any, hardware: Any) -> CpuTiling | None:
    """The :class:`CpuTiling` of ``sketch`` (a ``tlm.language.space.Sketch`` of ``mod`` on a CPU
    ``hardware``), or None when it tiles no block with a structure whose tiles split the block's
    own loops (elementwise tasks, cross-thread reductions, GPU sketches)."""
    from collectors.hardware import vector_registers
    from collectors.tir import block_realizes, contiguous_axis, is_reduction, plain_json, vector_lanes
    from tlm.language.replay import first_reshape
    from tlm.language.trace_flow import made_by

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
    spatial, reduction, axis = [], [], None
    pos, loaded = contiguous_axis(block)
    for inst, j in tiles[name]:
        if is_reduction(block.iter_vars[j]):
            reduction.append(inst)
        else:
            spatial.append(inst)
            if j == pos:
                axis = inst
    lanes = vector_lanes(int(hardware.vector_bits), str(block.writes[0].source.dtype))
    return CpuTiling(structure=structure[name], spatial=tuple(spatial), reduction=tuple(reduction), axis=axis,
                     vectorize=bool(loaded), lanes=lanes, registers=vector_registers(hardware))


def healthy_factors(tiling: CpuTiling, inst: int, n: int, chosen: Sequence[int], extent: int,
                    done: Mapping[int, Sequence[int]], values: list[int]) -> list[int]:
    """Of the legal ``values`` of tile ``inst``'s next factor (``chosen`` before it, ``n`` factors
    over ``extent``; ``done``: the tiles decided before this one), those that keep the program
    healthy (module docstring); ``values`` itself when none does (a rule never makes a valid
    program impossible)."""
    rest = extent // math.prod(chosen) if chosen else extent
    i = len(chosen)
    if i >= n - 1:  # the last factor is forced
        return values
    out = values
    if inst == tiling.axis and tiling.vectorize and extent % tiling.lanes == 0:
        vec = [v for v in out if (rest // v) % tiling.lanes == 0]
        out = vec or out
    if i != n - 2:
        return out
    if inst in tiling.spatial:
        # the innermost factor is fixed now: bound the register tile, every later tile counted as 1
        def fits(v: int) -> bool:
            return tiling.registers_needed({**done, inst: [*chosen, v, rest // v]}, False) <= tiling.registers
    elif inst in tiling.reduction and tiling.reduction[-1] == inst and all(s in done for s in tiling.spatial) \
            and all(done[r][-1] == 1 for r in tiling.reduction[:-1] if r in done):
        # the last reduction tile: an innermost level of ones widens the register tile
        wide = tiling.registers_needed(done, True)

        def fits(v: int) -> bool:
            return rest // v != 1 or wide <= tiling.registers
    else:
        return out
    kept = [v for v in out if fits(v)]
    return kept or out
