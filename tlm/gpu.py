"""GPU thread-extent constraints on tile factors, so CUDA sentences pass ``VerifyGPUCode``.

A CUDA multi-level-tiling sketch fuses one level of every spatial tile and binds it to
``threadIdx.x`` (and another level to ``vthread.x``). ``VerifyGPUCode`` then rejects a program
whose thread count leaves ``[thread_extent_low_inclusive, thread_extent_high_inclusive]`` (the
annotations MetaSchedule writes, capped by ``max_threads_per_block``) or whose virtual-thread
count exceeds :data:`MAX_VTHREAD`. A :class:`ThreadGroup` is such a bound loop: the tile
factors (instruction, position) whose product is its extent, found by following the trace's
data flow ``Bind <- Fuse <- Split <- SamplePerfectTile``.

:func:`feasible_factors` keeps a tile factor only if the groups can still all land in their
ranges: a dynamic program over the tiles that are not finished yet (their member factors may
be any divisors whose product divides what is left of the loop). Known gap: shared-memory
limits are not modelled (the footprint of a cache read depends on the access pattern), so a
CUDA sentence can still be rejected by ``VerifyGPUCode`` for shared memory (never repaired).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

#: VerifyGPUCode's limit on virtual threads per block (MetaSchedule's postproc default).
MAX_VTHREAD = 8
_LOW_KEY = "meta_schedule.thread_extent_low_inclusive"
_HIGH_KEY = "meta_schedule.thread_extent_high_inclusive"


@dataclass(frozen=True)
class ThreadGroup:
    """A thread-bound loop whose extent is a product of tile factors."""

    axis: str  # "threadIdx.x", "vthread.x", ...
    members: tuple[tuple[int, int], ...]  # (SamplePerfectTile instruction, factor position)
    low: int  # smallest legal extent
    high: int  # largest legal extent


def thread_groups(insts: Sequence[list], max_threads: int) -> tuple[ThreadGroup, ...]:
    """Thread groups of a sketch from its plain-JSON instructions (``[kind, inputs, attrs, outputs]``)."""
    producer: dict[str, tuple[int, int]] = {}
    for i, inst in enumerate(insts):
        for p, out in enumerate(inst[3] or []):
            if isinstance(out, str):
                producer[out] = (i, p)

    def members(rv: Any) -> list[tuple[int, int]] | None:
        if not isinstance(rv, str) or rv not in producer:
            return None
        i, p = producer[rv]
        kind, inputs = insts[i][0], insts[i][1]
        if kind == "Fuse":
            out: list[tuple[int, int]] = []
            for x in inputs:
                m = members(x)
                if m is None:
                    return None
                out += m
            return out
        if kind == "Split":
            f = inputs[1 + p] if 1 + p < len(inputs) else None
            if isinstance(f, str) and f in producer and insts[producer[f][0]][0] == "SamplePerfectTile":
                return [producer[f]]
        return None

    groups = []
    for i, inst in enumerate(insts):
        if inst[0] != "Bind":
            continue
        axis = str(inst[2][0])
        if not (axis.startswith("threadIdx") or axis.startswith("vthread")):
            continue
        m = members(inst[1][0])
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
        groups.append(ThreadGroup(axis, tuple(m), low, high))
    return tuple(groups)


@functools.lru_cache(maxsize=100_000)
def _divisors(n: int) -> tuple[int, ...]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return tuple(sorted(set(small + [n // i for i in small])))


@functools.lru_cache(maxsize=100_000)
def _tile_options(rest: int, free: tuple[int, ...], n_groups: int, caps: tuple[int, ...]) -> frozenset:
    """Per-group products reachable by a tile's free member factors (``free[k]`` = group of the
    k-th free member) whose product divides ``rest``; products above the caps are dropped."""
    states = {(1,) * n_groups: rest}
    for g in free:
        nxt: dict = {}
        for s, r in states.items():
            for d in _divisors(r):
                if s[g] * d > caps[g]:
                    break
                t = s[:g] + (s[g] * d,) + s[g + 1:]
                nxt[t] = r // d  # the rest is fixed by the products: rest / prod(t)
        states = nxt
    return frozenset(states)


def _combine(a: frozenset, b: frozenset, caps: tuple[int, ...]) -> frozenset:
    return frozenset(tuple(x * y for x, y in zip(s, t)) for s in a for t in b
                     if all(x * y <= c for x, y, c in zip(s, t, caps)))


def feasible_factors(groups: Sequence[ThreadGroup], tiles: dict[int, tuple[int, int]],
                     done: dict[int, Sequence[int]], current: int, chosen: Sequence[int],
                     extent: int, candidates: Sequence[int]) -> list[int]:
    """The ``candidates`` for the next factor of tile ``current`` that keep every group feasible.

    ``tiles`` maps each tile instruction to ``(n factors, static extent)``; ``done`` holds the
    factors of finished tiles; ``chosen`` the factors of the current tile so far.
    """
    mine = [g for g in groups if any(t == current for t, _ in g.members)]
    if not mine:
        return list(candidates)
    caps = tuple(g.high for g in groups)
    pos_group: dict[tuple[int, int], int] = {}
    for k, g in enumerate(groups):
        for m in g.members:
            pos_group[m] = k
    n_g = len(groups)
    other = frozenset({(1,) * n_g})
    for t in sorted({t for g in groups for t, _ in g.members}):
        if t == current:
            continue
        n, ext = tiles[t]
        if t in done:
            fixed = [1] * n_g
            for p, v in enumerate(done[t]):
                if (t, p) in pos_group:
                    fixed[pos_group[(t, p)]] *= int(v)
            opts = frozenset({tuple(fixed)})
        else:
            if ext is None:
                return list(candidates)  # extent varies with earlier decisions: no constraint
            free = tuple(pos_group[(t, p)] for p in range(n) if (t, p) in pos_group)
            opts = _tile_options(ext, free, n_g, caps)
        other = _combine(other, opts, caps)
        if not other:
            return []
    n_cur = tiles[current][0]
    base = [1] * n_g
    for p, v in enumerate(chosen):
        if (current, p) in pos_group:
            base[pos_group[(current, p)]] *= int(v)
    p = len(chosen)
    rest_before = extent // math.prod(chosen) if chosen else extent
    ok = []
    for d in candidates:
        fixed = list(base)
        if (current, p) in pos_group:
            fixed[pos_group[(current, p)]] *= d
        free = tuple(pos_group[(current, q)] for q in range(p + 1, n_cur) if (current, q) in pos_group)
        mine_opts = _tile_options(rest_before // d, free, n_g, caps)
        if any(all(lo <= f * x * y <= hi for f, x, y, lo, hi in
                   zip(fixed, s, t, (g.low for g in groups), (g.high for g in groups)))
               for s in other for t in mine_opts):
            ok.append(d)
    return ok
