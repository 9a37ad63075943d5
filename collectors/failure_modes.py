"""The static failure modes of a CPU program: why it is slow, read from its loops alone.

Why this exists: decoding the 421 pool programs slower than 0.2x MetaSchedule@256 on a Zen 4
(issue 32), five shapes explained 410 of them, and none needs a measurement to see: the
innermost tile of the output's contiguous (stride-1) axis is too short for SIMD, or a fraction
of a vector, or a long vector with a ragged tail; the accumulators of the register tile
outnumber the vector registers; or nothing runs in parallel. A pool (or a teacher) is healthy
when few of its programs show one, so these shares are a standard figure of the quality
benchmark, for every method and for the corpus the model learns from.

Everything is read from the scheduled TIR, never guessed from names: the *main block* is the
reduction block with the largest iteration domain (or, without a reduction, the largest
block); the stride-1 axis is the last index of the buffer it writes; which loops carry that
axis, and with which stride, comes from TVM's affine iter-map analysis of the block's bindings
(fused and split loops alike). The modes (``L`` = vector lanes of the written dtype, ``R`` = the
target's vector registers an accumulator may take):

- ``no_simd``: the innermost factor ``f`` of the stride-1 axis (the extent of its stride-1
  loop) is 1 or 2;
- ``short_vector``: ``2 < f < L``, less than one vector;
- ``ragged_vector``: ``f > L`` and ``f % L != 0``, full vectors and a ragged tail;
- ``register_spill``: the register tile (the spatial loops inside the innermost reduction loop)
  needs more than ``R`` vector registers as accumulators (``tile / f * ceil(f / L)``; ``R`` is
  ``collectors.hardware.accumulator_registers``: all but the few the operands need);
- ``no_reuse``: the register tile spans more than ``collectors.tir.SHARED_TILE_MAX`` values of iterators
  that index every input (``collectors.tir.shared_iterators``: a batched matmul's head, a
  depthwise convolution's channel), whose accumulators each load their own operands. Found after
  the first five: the served top-1 of BERT's attention matmuls on a Zen 3 held the 12 heads in the
  register tile (1.2-1.8 ms against MetaSchedule's 0.14 ms), and on the Zen 3 corpus's depthwise
  convolutions and batched matmuls such tiles of 3 or more ran at 0.05-0.29x their task's best
  (1: 0.42x, 2: 0.34x; `bench.studies.register_tiles`), the best record holding 1 or 2 in 22 of 23 workloads;
- ``restream``: the parallel loop splits a spatial iterator each of whose chunks reads again more
  input than the L2 holds (``collectors.block_axes.rereads``), while another that reads less again
  could give every core chunks of its own. Found after the first six: on the Rocket Lake the
  shipped model's slowest greedy programs split a big matmul's rows over the cores, every chunk
  streaming all of B (ViT's 197 x 768 x 3072 dense 16x slower than the rules' program, which
  splits its columns); healthy decoding's ``reread`` rule;
- ``one_core``: no parallel loop of extent >= 2 over the main block on a multi-core target.

The three vector modes count only when they were avoidable: the axis has a tile that is a
multiple of ``L`` (a 7- or 14-wide NCHW row has none), and the axis is contiguous in an input the
block reads (a GEMV whose inputs are contiguous along the reduction is not asked to vectorize
its output axis).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from collectors.hardware import accumulator_registers
from collectors.tir import (SHARED_TILE_MAX, block_realizes, contiguous_axis, is_reduction, shared_iterators,
                            vector_lanes)

#: every mode, in the order reports list them
MODES = ("no_simd", "short_vector", "ragged_vector", "register_spill", "no_reuse", "restream", "one_core")


@dataclass(frozen=True)
class LoopShape:
    """What the failure modes are read from: the main block's loops, summarised."""

    block: str  # the main block's name
    axis_extent: int  # extent of the written buffer's last (stride-1) dimension
    inner_factor: int  # extent of the loop that walks the stride-1 axis with stride 1 (1: none does)
    register_tile: int | None  # elements of the spatial loops inside the innermost reduction loop; None: no reduction
    parallel: int  # product of the parallel loops' extents over the main block (1: one core)
    lanes: int  # vector lanes of the written dtype on the target
    registers: int  # vector registers the accumulators may take on the target (accumulator_registers)
    contiguous_input: bool  # the stride-1 output axis is the last dimension of an input the block reads
    shared_tile: int = 1  # register-tile elements over iterators every input reads (collectors.tir.shared_iterators)
    #: the parallel loop splits an iterator whose chunks each read again more input than the L2
    #: holds, while another, whose chunks read less again, is long enough for the cores
    restream: bool = False

    @property
    def accumulators(self) -> int | None:
        """Vector registers the register tile holds as accumulators (``tile / f * ceil(f / L)``;
        under 3 lanes a stride-1 row is ``f`` scalars); None without a reduction."""
        if self.register_tile is None:
            return None
        f = self.inner_factor
        per_row = max(1, math.ceil(f / self.lanes)) if f > 2 else f
        return self.register_tile // max(1, f) * per_row


def _vars(expr: Any) -> set:
    from tvm.tirx.analysis import undefined_vars

    return set(undefined_vars(expr))


def _domain(loops: Sequence[Any]) -> int:
    return math.prod(int(lp.extent) for lp in loops) if loops else 1


def _main_block(func: Any) -> tuple[Any, tuple] | None:
    realizes = [(r, lp) for r, lp in block_realizes(func.body) if r.block.name_hint != "root" and r.block.writes]
    if not realizes:
        return None
    reducing = [(r, lp) for r, lp in realizes if any(is_reduction(v) for v in r.block.iter_vars)]
    return max(reducing or realizes, key=lambda rl: _domain(rl[1]))


def _stride1_factor(binding: Any, loops: Sequence[Any], inner_from: int = 0) -> int:
    """How many consecutive values of ``binding`` (a block iter's loop expression) one loop of
    ``loops[inner_from:]`` walks with stride 1: the innermost factor of that axis (1: no such
    loop walks it contiguously; the loops before ``inner_from`` are held at their start).
    Read from TVM's iter map, where fused and split loops nest as marks of sums of splits."""
    from tvm import ir, sym

    dom = {lp.loop_var: ir.Range.from_min_extent(lp.min, lp.extent if i >= inner_from else 1)
           for i, lp in enumerate(loops)}
    res = sym.detect_iter_map([binding], dom)
    if not res.indices:
        return 1
    expr = res.indices[0]

    def run(split: Any) -> int:
        src = split.source.source
        if int(split.lower_factor) != 1:
            return 1  # the upper digits of a loop: it moves in steps > 1
        if isinstance(src, sym.IterSumExpr):  # a fused mark: the stride-1 part of its sum
            inner = [a for a in src.args if int(a.scale) == 1]
            return min(run(inner[0]), int(split.extent)) if inner else 1
        return int(split.extent)

    terms = list(expr.args) if isinstance(expr, sym.IterSumExpr) else [expr]
    return next((run(t) for t in terms if isinstance(t, sym.IterSplitExpr) and int(t.scale) == 1), 1)


def loop_shape(mod: Any, hardware: Any) -> LoopShape | None:
    """The :class:`LoopShape` of a scheduled module's main block on ``hardware`` (None: no block)."""
    from tvm import tirx

    func = next(iter(mod.functions.values())) if hasattr(mod, "functions") else mod
    found = _main_block(func)
    if found is None:
        return None
    realize, loops = found
    block = realize.block
    binding = {iv.var: val for iv, val in zip(block.iter_vars, realize.iter_values)}
    axis, loaded = contiguous_axis(block)
    out_buf = block.writes[0].source  # the buffer (TVM 0.27: a TensorRegion's source)
    lanes = vector_lanes(int(getattr(hardware, "vector_bits", 128)), str(out_buf.dtype))
    axis_extent = int(out_buf.shape[-1]) if len(out_buf.shape) else 1
    reduce_vars = [iv.var for iv in block.iter_vars if is_reduction(iv)]
    tile, depth, shared_tile = None, -1, 1
    if reduce_vars:  # the register tile: the spatial loops inside the innermost reduction loop
        carried = set().union(*(_vars(binding[v]) for v in reduce_vars))
        depth = max((i for i, lp in enumerate(loops) if lp.loop_var in carried and int(lp.extent) > 1), default=-1)
        spatial = set().union(*(_vars(binding[iv.var]) for iv in block.iter_vars if not is_reduction(iv)))
        tile = math.prod(int(lp.extent) for lp in loops[depth + 1:] if lp.loop_var in spatial)
        shared = [block.iter_vars[i] for i in shared_iterators(block)]
        if shared:  # the loops that walk only those iterators
            walks = set().union(*(_vars(binding[iv.var]) for iv in shared))
            others = set().union(*(_vars(binding[iv.var]) for iv in block.iter_vars if iv not in shared))
            shared_tile = math.prod(int(lp.extent) for lp in loops[depth + 1:]
                                    if lp.loop_var in walks and lp.loop_var not in others)
    # the innermost factor: what a loop of the register tile (all loops, without a reduction) walks
    inner = _stride1_factor(binding[block.iter_vars[axis].var], loops, depth + 1) if axis is not None else 1
    parallel = math.prod(int(lp.extent) for lp in loops if lp.kind == tirx.ForKind.PARALLEL)
    return LoopShape(block=str(block.name_hint), axis_extent=axis_extent, inner_factor=inner, register_tile=tile,
                     parallel=parallel, lanes=lanes, registers=accumulator_registers(hardware),
                     contiguous_input=bool(loaded), shared_tile=shared_tile,
                     restream=bool(reduce_vars) and parallel > 1 and _restreams(block, binding, loops, axis, hardware,
                                                                                lanes))


def _restreams(block: Any, binding: dict, loops: Sequence[Any], axis: int | None, hardware: Any, lanes: int) -> bool:
    """The ``restream`` mode: a spatial iterator split by the parallel loop, each of whose chunks
    reads again more input than the L2 holds (``collectors.block_axes.rereads``: a matmul's rows
    read all of B), while another spatial iterator that reads less again spans enough values to
    give every core chunks of its own (whole vectors of it, on the stride-1 axis)."""
    from tvm import ir, sym, tirx

    from collectors.block_axes import rereads
    from collectors.blocking import l2_bytes

    reread, cache = rereads(block, in_bytes=True), l2_bytes(hardware)
    cores = int(getattr(hardware, "cores", 1) or 1)
    dom = {lp.loop_var: ir.Range.from_min_extent(lp.min, lp.extent if lp.kind == tirx.ForKind.PARALLEL else 1)
           for lp in loops}
    spatial = [i for i, iv in enumerate(block.iter_vars) if not is_reduction(iv)]

    def ways(i: int) -> int:  # how many values of iterator i the parallel loop spreads over the chunks
        res = sym.detect_iter_map([binding[block.iter_vars[i].var]], dom)
        if not res.indices:
            return 1
        expr = res.indices[0]
        terms = list(expr.args) if isinstance(expr, sym.IterSumExpr) else [expr]
        return math.prod(int(t.extent) for t in terms if isinstance(t, sym.IterSplitExpr))

    for i in spatial:
        if reread[i] > cache and ways(i) > 1 and any(
                reread[j] < reread[i] and int(block.iter_vars[j].dom.extent) >= cores * (lanes if j == axis else 1)
                for j in spatial if j != i):
            return True
    return False


def modes_of(shape: LoopShape | None, cores: int = 2) -> tuple[str, ...]:
    """The failure modes a :class:`LoopShape` shows (module docstring), in :data:`MODES` order."""
    if shape is None:
        return ()
    out = []
    f, lanes = shape.inner_factor, shape.lanes
    vector_possible = shape.contiguous_input and any(
        d % lanes == 0 for d in range(lanes, shape.axis_extent + 1) if shape.axis_extent % d == 0)
    if vector_possible:
        if f <= 2:
            out.append("no_simd")
        elif f < lanes:
            out.append("short_vector")
        elif f % lanes:
            out.append("ragged_vector")
    if shape.register_tile is not None and shape.accumulators > shape.registers:
        out.append("register_spill")
    if shape.shared_tile > SHARED_TILE_MAX:
        out.append("no_reuse")
    if shape.restream:
        out.append("restream")
    if cores >= 2 and shape.parallel < 2:
        out.append("one_core")
    return tuple(m for m in MODES if m in out)


def modes_of_schedule(sch_or_mod: Any, hardware: Any) -> tuple[str, ...]:
    """The failure modes of a scheduled program (a ``Schedule`` or its module) on ``hardware``."""
    mod = getattr(sch_or_mod, "mod", sch_or_mod)
    return modes_of(loop_shape(mod, hardware), int(getattr(hardware, "cores", 1) or 1))


def modes_of_trace(mod: Any, trace_json: str | list, hardware: Any) -> tuple[str, ...]:
    """The failure modes of a measured record's program: ``trace_json`` applied to the task's
    module (a stored trace is postprocessed: ``collectors.tir.schedule_of``)."""
    from collectors.tir import schedule_of

    return modes_of_schedule(schedule_of(mod, trace_json), hardware)


def health(programs: Iterable[Sequence[str]]) -> dict:
    """Shares of programs in each mode and in any (``{"n", "any", <mode>: share}``) of a pool:
    the lists of modes of its programs, one list each."""
    progs = [tuple(p) for p in programs]
    n = len(progs)
    out: dict = {"n": n, "any": round(sum(1 for p in progs if p) / n, 3) if n else None}
    for m in MODES:
        out[m] = round(sum(1 for p in progs if m in p) / n, 3) if n else None
    return out
