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
