"""GPU limits on tile factors, so every CUDA sentence passes ``VerifyGPUCode`` as written.

Four limits of a CUDA multi-level-tiling sketch depend on its tile factors, and
``VerifyGPUCode`` (the postprocessor MetaSchedule runs last) rejects a program that breaks any:

* **Thread extents.** One level of every spatial tile is fused and bound to ``threadIdx.x``
  (another to ``vthread.x``); the thread count must stay in
  ``[thread_extent_low_inclusive, thread_extent_high_inclusive]`` (capped by
  ``max_threads_per_block``), the virtual-thread count at most :data:`MAX_VTHREAD`. In
  tensor-core sketches a warp runs along ``threadIdx.x`` and the tiles bind ``threadIdx.y``.
* **Software pipelines.** Sketches that pipeline the shared-memory copies annotate the fused
  outer reduction loop with ``software_pipeline_stage``; when that loop has extent 1 the stages
  no longer match the loop body and ``InjectSoftwarePipeline`` fails (measured: every such
  program is rejected), so its extent must be at least 2.
* **Shared memory.** The shared-memory caches must fit ``max_shared_memory_per_block``: the
  footprint model is :mod:`tlm.language.shared_memory`.
* **Vector width.** A cooperative fetch may not vectorise past 16 bytes (nor past 4 lanes when
  its global reads are strided): :func:`tlm.language.shared_memory.vector_lanes`.

A :class:`ThreadGroup` (thread and pipeline limits) is a loop whose extent is a product of tile
factors, found by following the trace's data flow ``Bind|Annotate <- Fuse <- Split <-
SamplePerfectTile``. :class:`SharedMemory` is the footprint model. :func:`feasible_factors` keeps
a candidate factor only if *some* completion of every unfinished tile meets all limits (a
depth-first search over per-tile options, pruned by bounds), so a walk never reaches a dead end.
"""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Sequence

from tlm.language.numbers import divisors
from tlm.language.shared_memory import SharedMemory, buffer_bytes, level_range, total_bytes
from tlm.language.trace_flow import PIPELINE_KEY, producers, split_members

logger = logging.getLogger(__name__)

#: VerifyGPUCode's limit on virtual threads per block (MetaSchedule's postproc default).
MAX_VTHREAD = 8
#: Upper bound used for groups that only have a lower limit (pipelined loops).
NO_LIMIT = 1 << 62
PIPELINE_AXIS = "software_pipeline"
_LOW_KEY = "meta_schedule.thread_extent_low_inclusive"
_HIGH_KEY = "meta_schedule.thread_extent_high_inclusive"
_WARP_KEY = "warp_execution"


@dataclass(frozen=True)
class ThreadGroup:
    """A bound or pipelined loop whose extent is a product of tile factors."""

    axis: str  # "threadIdx.x", "vthread.x", ... or PIPELINE_AXIS
    members: tuple[tuple[int, int], ...]  # (SamplePerfectTile instruction, factor position)
    low: int  # smallest legal extent
    high: int  # largest legal extent


def thread_groups(insts: Sequence[list], max_threads: int, warp: int = 32) -> tuple[ThreadGroup, ...]:
    """Thread and pipeline groups of a sketch from its plain-JSON instructions
    (``[kind, inputs, attrs, outputs]``).

    In a sketch with a ``warp_execution`` block (tensor-core sketches) a warp of ``warp``
    threads runs along ``threadIdx.x``, so a tiled ``threadIdx.y``/``z`` loop counts ``warp``
    threads per iteration: its bounds are the block's divided by ``warp``.
    """
    producer = producers(insts)
    warp_execution = any(x[0] == "Annotate" and x[2] and x[2][0] == _WARP_KEY for x in insts)
    groups = []
    for i, inst in enumerate(insts):
        if inst[0] == "Annotate" and inst[2] and inst[2][0] == PIPELINE_KEY:
            m = split_members(insts, producer, inst[1][0])
            if m:
                groups.append(ThreadGroup(PIPELINE_AXIS, tuple(m), 2, NO_LIMIT))
            continue
        if inst[0] != "Bind":
            continue
        axis = str(inst[2][0])
        if not (axis.startswith("threadIdx") or axis.startswith("vthread")):
            continue
        m = split_members(insts, producer, inst[1][0])
        if not m:
            continue
        low, high = 1, max_threads
        if axis.startswith("vthread"):
            high = MAX_VTHREAD
        else:
            for later in insts[i + 1:]:
                if later[0] == "Bind" and str(later[2][0]).startswith("threadIdx"):
                    break
                if later[0] == "Annotate" and later[2][0] == _LOW_KEY:
                    low = int(later[1][1])
                if later[0] == "Annotate" and later[2][0] == _HIGH_KEY:
                    high = min(high, int(later[1][1]))
        if warp_execution and axis.startswith("threadIdx") and axis != "threadIdx.x":
            low, high = -(-low // warp), high // warp
        groups.append(ThreadGroup(axis, tuple(m), low, high))
    return tuple(groups)


# ------------------------------------------------------------------------------------------
# shared memory
# ------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------
# feasibility of tile factors
# ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=20_000)
def _completions(rest: int, k: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every ``k`` factors whose product is ``rest`` (the last one at most ``max_innermost``)."""
    if k == 0:
        return ((),) if rest == 1 else ()
    if k == 1:
        return ((rest,),) if max_innermost <= 0 or rest <= max_innermost else ()
    return tuple((d,) + tail for d in divisors(rest) for tail in _completions(rest // d, k - 1, max_innermost))


class _Problem:
    """The limits of one sketch, over the tiles they involve."""

    def __init__(self, groups: Sequence[ThreadGroup], smem: SharedMemory | None,
                 tiles: dict[int, tuple]) -> None:
        self.groups = tuple(groups)
        self.smem = smem
        self.lows = tuple(g.low for g in self.groups)
        self.highs = tuple(g.high for g in self.groups)
        self.pos_group = {m: k for k, g in enumerate(self.groups) for m in g.members}
        involved = {t for g in self.groups for t, _ in g.members}
        self.rsets: dict[int, list[tuple[tuple[int, ...], bool]]] = {}  # (positions, product)
        if smem is not None:
            for b in smem.buffers:
                for t, ps in b.relaxed:
                    involved.add(t)
                    if (ps, b.product) not in self.rsets.setdefault(t, []):
                        self.rsets[t].append((ps, b.product))
        self.order = tuple(sorted(involved))
        self._options: dict[tuple, list] = {}
        self.index = {t: i for i, t in enumerate(self.order)}
        self.tiles = {t: (tiles[t][0], tiles[t][1], tiles[t][2] if len(tiles[t]) > 2 else -1)
                      for t in self.order}
        # per buffer and dim: ((tile position in order, relax-set index, coef), ...)
        self.dims = []
        if smem is not None:
            for b in smem.buffers:
                rel = dict(b.relaxed)
                self.dims.append((b.pool, b.elem_bytes * b.versions, b.align, tuple(
                    (shape, base, tuple((self.index[t], self.rsets[t].index((rel[t], b.product)), c) for t, c in terms))
                    for shape, base, terms in b.dims)))

    def option(self, t: int, factors: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        g = [1] * len(self.groups)
        for p, f in enumerate(factors):
            k = self.pos_group.get((t, p))
            if k is not None:
                g[k] *= int(f)
        return tuple(g), tuple(level_range(factors, ps, prod) for ps, prod in self.rsets.get(t, ()))

    def options(self, t: int, prefix: tuple[int, ...], rest: int) -> list:
        """Pareto-minimal (group products, spans) of every completion of tile ``t`` (cached)."""
        key = (t, prefix, rest)
        hit = self._options.get(key)
        if hit is None:
            if len(self._options) > 50_000:
                self._options.clear()
            hit = self._options[key] = self._enumerate(t, prefix, rest)
        return hit

    def _enumerate(self, t: int, prefix: tuple[int, ...], rest: int) -> list:
        n, _, max_inner = self.tiles[t]
        best: dict[tuple, list[tuple]] = {}
        for tail in _completions(rest, n - len(prefix), max_inner):
            g, s = self.option(t, prefix + tail)
            if any(x > h for x, h in zip(g, self.highs)):
                continue
            kept = best.setdefault(g, [])
            if any(all(a <= b for a, b in zip(o, s)) for o in kept):
                continue
            kept[:] = [o for o in kept if not all(a <= b for a, b in zip(s, o))] + [s]
        out = [(g, s) for g, ss in best.items() for s in ss]
        out.sort(key=lambda o: (sum(o[1]), o[0]))
        return out

    def footprint(self, spans: Sequence[tuple[int, ...]]) -> int:
        sizes = []
        for pool, nbytes, align, dims in self.dims:
            extents = [min(shape, base + sum(c * spans[i][r] for i, r, c in terms)) for shape, base, terms in dims]
            sizes.append((pool, buffer_bytes(nbytes, extents, align)))
        return total_bytes(sizes)

    def feasible(self, opts: Sequence[list]) -> bool:
        """Whether one option per tile meets every group range and the shared-memory limit."""
        n_t, n_g = len(opts), len(self.groups)
        if any(not o for o in opts):
            return False
        # suffix bounds: largest group products, smallest spans still reachable
        max_g = [[1] * n_g for _ in range(n_t + 1)]
        min_s = [tuple(min(s[r] for _, s in o) for r in range(len(o[0][1]))) for o in opts]
        for i in range(n_t - 1, -1, -1):
            top = [max(g[k] for g, _ in opts[i]) for k in range(n_g)]
            max_g[i] = [min(NO_LIMIT, a * b) for a, b in zip(max_g[i + 1], top)]
        limit = self.smem.limit if self.smem is not None else None
        failed: set = set()

        def dfs(i: int, g: tuple, spans: list) -> bool:
            if i == n_t:
                return all(lo <= x for x, lo in zip(g, self.lows)) and \
                    (limit is None or self.footprint(spans) <= limit)
            key = (i, g, tuple(spans))
            if key in failed:
                return False
            for og, os_ in opts[i]:
                ng = tuple(a * b for a, b in zip(g, og))
                if any(x > h for x, h in zip(ng, self.highs)):
                    continue
                if any(x * m < lo for x, m, lo in zip(ng, max_g[i + 1], self.lows)):
                    continue
                if limit is not None and self.footprint(spans + [os_] + min_s[i + 1:]) > limit:
                    continue
                if dfs(i + 1, ng, spans + [os_]):
                    return True
            failed.add(key)
            return False

        return dfs(0, (1,) * n_g, [])


_PROBLEMS: dict[tuple, _Problem] = {}


def feasible_factors(groups: Sequence[ThreadGroup], tiles: dict[int, tuple],
                     done: dict[int, Sequence[int]], current: int, chosen: Sequence[int],
                     extent: int, candidates: Sequence[int],
                     smem: SharedMemory | None = None) -> list[int]:
    """The ``candidates`` for the next factor of tile ``current`` that keep every limit
    reachable: some completion of this and every unfinished tile meets every group range
    and the shared-memory limit.

    ``tiles`` maps each tile instruction to ``(n factors, static extent[, max innermost])``;
    ``done`` holds the factors of finished tiles; ``chosen`` the factors of ``current`` so far.
    """
    key = (tuple(groups), smem, tuple(sorted((t, tuple(v)) for t, v in tiles.items())))
    prob = _PROBLEMS.get(key)
    if prob is None:
        if len(_PROBLEMS) > 4096:
            _PROBLEMS.clear()
        prob = _PROBLEMS[key] = _Problem(groups, smem, tiles)
    if current not in prob.index:
        return list(candidates)
    base = []
    for t in prob.order:
        if t == current:
            base.append(None)
        elif t in done:
            base.append([prob.option(t, tuple(int(v) for v in done[t]))])
        else:
            ext = prob.tiles[t][1]
            if ext is None:
                return list(candidates)  # extent varies with earlier decisions: no constraint
            base.append(prob.options(t, (), ext))
    at = prob.index[current]
    prefix = tuple(int(v) for v in chosen)
    rest = extent // math.prod(prefix) if prefix else extent
    ok = []
    for d in candidates:
        opts = list(base)
        opts[at] = prob.options(current, prefix + (int(d),), rest // int(d))
        if prob.feasible(opts):
            ok.append(d)
    return ok
