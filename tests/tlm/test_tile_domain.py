"""Tile domains are exact: the legal walk reaches every valid factorisation and nothing else."""
from __future__ import annotations

import itertools
import math

from hypothesis import given, settings, strategies as st

from tlm.language import tile_factor_values
from tlm.language.space import Choice


def walk_all(choice: Choice, extent: int) -> set[tuple[int, ...]]:
    out: set[tuple[int, ...]] = set()

    def rec(chosen: list[int]) -> None:
        if len(chosen) == choice.n:
            out.add(tuple(chosen))
            return
        values = tile_factor_values(choice, extent, chosen)
        assert values or not chosen, f"dead end after {chosen}: a legal prefix with no completion"
        for v in values:
            rec(chosen + [v])

    rec([])
    return out


def brute(choice: Choice, extent: int) -> set[tuple[int, ...]]:
    divs = [d for d in range(1, extent + 1) if extent % d == 0]
    ok = set()
    for t in itertools.product(divs, repeat=choice.n):
        if math.prod(t) != extent:
            continue
        if choice.kind == "tile" and choice.max_innermost > 0 and t[-1] > choice.max_innermost:
            continue
        if choice.kind == "ptile" and math.prod(t[choice.partition_pos:]) % choice.innerpart_factor:
            continue
        ok.add(t)
    return ok


@settings(max_examples=150, deadline=None)
@given(extent=st.integers(1, 96), n=st.integers(1, 4), inner=st.sampled_from([-1, 1, 2, 3, 4, 8, 16, 64]))
def test_perfect_tile_domain_is_exact(extent, n, inner):
    c = Choice(0, "tile", n=n, max_innermost=inner)
    assert walk_all(c, extent) == brute(c, extent)


@settings(max_examples=100, deadline=None)
@given(extent=st.integers(1, 96), n=st.integers(2, 4), data=st.data())
def test_partitioned_tile_domain_is_exact(extent, n, data):
    pos = data.draw(st.integers(1, n - 1))
    factor = data.draw(st.sampled_from([1, 2, 3, 4, 8]))
    c = Choice(0, "ptile", n=n, partition_pos=pos, innerpart_factor=factor)
    assert walk_all(c, extent) == brute(c, extent)


def walk_tiles(tiles: list[Choice], groups, smem=None) -> set[tuple]:
    """Every factorisation a walk over ``tiles`` (in order) with the GPU filter reaches,
    asserting that no legal prefix is a dead end."""
    from tlm.language.gpu import feasible_factors

    table = {c.inst_index: (c.n, c.extent, c.max_innermost) for c in tiles}
    found: set = set()

    def rec(done: dict, k: int, chosen: list) -> None:
        cur = tiles[k]
        values = feasible_factors(groups, table, done, cur.inst_index, chosen, cur.extent,
                                  tile_factor_values(cur, cur.extent, chosen), smem)
        if not values:
            assert not done and not chosen, f"dead end at {done} {chosen}"
            return
        for v in values:
            nxt = chosen + [v]
            if len(nxt) < cur.n:
                rec(done, k, nxt)
            elif k + 1 < len(tiles):
                rec({**done, cur.inst_index: nxt}, k + 1, [])
            else:
                found.add(tuple(tuple(done[c.inst_index]) for c in tiles[:-1]) + (tuple(nxt),))

    rec({}, 0, [])
    return found


@settings(max_examples=40, deadline=None)
@given(e0=st.sampled_from([4, 6, 8, 12, 16, 24]), e1=st.sampled_from([2, 3, 8, 9, 16]),
       lo=st.integers(1, 8), span=st.integers(0, 16), vmax=st.integers(1, 4))
def test_thread_group_filter_is_exact(e0, e1, lo, span, vmax):
    """Walking tiles with the GPU filter reaches exactly the factorisations whose thread and
    vthread products are in range, with no dead ends."""
    from tlm.language.gpu import ThreadGroup

    hi = lo + span
    t0, t1 = Choice(10, "tile", n=3, max_innermost=64, extent=e0), Choice(20, "tile", n=3, max_innermost=64, extent=e1)
    groups = (ThreadGroup("vthread.x", ((10, 0), (20, 0)), 1, vmax),
              ThreadGroup("threadIdx.x", ((10, 1), (20, 1)), lo, hi))
    want = {(a, b) for a in brute(t0, e0) for b in brute(t1, e1)
            if a[0] * b[0] <= vmax and lo <= a[1] * b[1] <= hi}
    assert walk_tiles([t0, t1], groups) == want


@settings(max_examples=40, deadline=None)
@given(e0=st.sampled_from([4, 6, 8, 12, 16]), e1=st.sampled_from([2, 4, 6, 9, 16]),
       e2=st.sampled_from([1, 3, 4]), lo=st.integers(1, 4), pipe=st.booleans(),
       limit=st.integers(4, 400), inner=st.sampled_from([-1, 2, 4]))
def test_shared_memory_filter_is_exact(e0, e1, e2, lo, pipe, limit, inner):
    """With a shared-memory limit (a conv-like ``x[i, k, y + r]`` access, thread-bound and
    inner levels relaxed), a pipelined loop (extent >= 2) and a thread range, the walk reaches
    exactly the factorisations whose footprint fits, with no dead ends."""
    from tlm.language.gpu import NO_LIMIT, PIPELINE_AXIS, ThreadGroup
    from tlm.language.shared_memory import SharedBuffer, SharedMemory, span

    ti = Choice(10, "tile", n=3, max_innermost=inner, extent=e0)  # spatial: block, thread, inner
    tk = Choice(20, "tile", n=2, max_innermost=inner, extent=e1)  # reduction: outer, inner
    tr = Choice(30, "tile", n=2, max_innermost=inner, extent=e2)  # reduction: outer, inner
    groups = [ThreadGroup("threadIdx.x", ((10, 1),), lo, 8)]
    if pipe:
        groups.append(ThreadGroup(PIPELINE_AXIS, ((20, 0), (30, 0)), 2, NO_LIMIT))
    buf = SharedBuffer("x", 2, ((e0, 1, ((10, 1),)), (e1, 1, ((20, 1),)), (e0 + e2 - 1, 1, ((10, 1), (30, 1)))),
                       ((10, (1, 2)), (20, (1,)), (30, (1,))), versions=2 if pipe else 1)
    smem = SharedMemory(limit=limit, buffers=(buf,))

    def fits(a, b, c) -> bool:
        threads_ok = lo <= a[1] <= 8 and (not pipe or b[0] * c[0] >= 2)
        return threads_ok and smem.footprint({10: a, 20: b, 30: c}) <= limit

    want = {(a, b, c) for a in brute(ti, e0) for b in brute(tk, e1) for c in brute(tr, e2) if fits(a, b, c)}
    assert walk_tiles([ti, tk, tr], tuple(groups), smem) == want
    for a, b, c in want:  # the model's span is the range of the relaxed levels
        assert span(a, (1, 2)) == a[1] * a[2] - 1
