"""Tile domains are exact: the legal walk reaches every valid factorisation and nothing else."""
from __future__ import annotations

import itertools
import math

from hypothesis import given, settings, strategies as st

from tlm.language import tile_factor_values
from tlm.space import Choice


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


@settings(max_examples=40, deadline=None)
@given(e0=st.sampled_from([4, 6, 8, 12, 16, 24]), e1=st.sampled_from([2, 3, 8, 9, 16]),
       lo=st.integers(1, 8), span=st.integers(0, 16), vmax=st.integers(1, 4))
def test_thread_group_filter_is_exact(e0, e1, lo, span, vmax):
    """Walking tiles with the GPU filter reaches exactly the factorisations whose thread and
    vthread products are in range, with no dead ends."""
    from tlm.gpu import ThreadGroup, feasible_factors

    hi = lo + span
    t0, t1 = Choice(10, "tile", n=3, max_innermost=64, extent=e0), Choice(20, "tile", n=3, max_innermost=64, extent=e1)
    groups = (ThreadGroup("vthread.x", ((10, 0), (20, 0)), 1, vmax),
              ThreadGroup("threadIdx.x", ((10, 1), (20, 1)), lo, hi))
    tiles = {10: (3, e0), 20: (3, e1)}
    found: set = set()

    def rec(done: dict, cur: Choice, chosen: list) -> None:
        ext = cur.extent
        values = feasible_factors(groups, tiles, done, cur.inst_index, chosen, ext,
                                  tile_factor_values(cur, ext, chosen))
        if not values:
            assert not done and not chosen, f"dead end at {done} {chosen}"
            return
        for v in values:
            nxt = chosen + [v]
            if len(nxt) < cur.n:
                rec(done, cur, nxt)
            elif cur is t0:
                rec({10: nxt}, t1, [])
            else:
                found.add((tuple(done[10]), tuple(nxt)))

    rec({}, t0, [])
    want = {(a, b) for a in brute(t0, e0) for b in brute(t1, e1)
            if a[0] * b[0] <= vmax and lo <= a[1] * b[1] <= hi}
    assert found == want
