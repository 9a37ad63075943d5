"""The static failure modes, pinned on hand-made programs (issue 32, item 1): each program is a
matmul tiled by hand so that exactly one thing is wrong with it, read on a fixed AVX-512 target
(Zen 4: 16 fp32 lanes, 32 vector registers, 2 cores; encoded and read only, never run)."""
from __future__ import annotations

import pytest

from collectors.failure_modes import MODES, health, loop_shape, modes_of, modes_of_schedule


def _tiled(mod, ii: int, jj: int, kk: int = 4, parallel: bool = True):
    """i, j, k split into (outer, inner); the register tile (i1, j1) inside the inner reduction loop."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod)
    blk = sch.get_sblock("C")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, ii])
    j0, j1 = sch.split(j, [None, jj])
    k0, k1 = sch.split(k, [None, kk])
    sch.reorder(i0, j0, k0, k1, i1, j1)
    if parallel:
        sch.parallel(i0)
    return sch


def _mm(n=64, m=64, k=64):
    from tests.helpers.workloads import matmul

    return matmul(n, m, k)


def test_a_healthy_register_tile_shows_no_mode(znver4_hw):
    sch = _tiled(_mm(), 4, 32)
    shape = loop_shape(sch.mod, znver4_hw)
    assert (shape.inner_factor, shape.register_tile, shape.parallel, shape.lanes, shape.registers) == (32, 128, 16, 16, 28)
    assert shape.contiguous_input and shape.axis_extent == 64
    assert modes_of_schedule(sch, znver4_hw) == ()


@pytest.mark.parametrize("ii, jj, mode", [
    (4, 1, "no_simd"), (4, 2, "no_simd"),
    (4, 8, "short_vector"),
    (32, 32, "register_spill"),  # 32 rows x 2 vectors = 64 accumulators > 32 registers
])
def test_each_mode_on_its_own(znver4_hw, ii, jj, mode):
    assert modes_of_schedule(_tiled(_mm(), ii, jj), znver4_hw) == (mode,)


def test_accumulators_leave_registers_for_the_operands(znver4_hw):
    """Every vector register an accumulator (16 rows x 2 vectors = 32 of 32) leaves none for the
    broadcast and loaded operands: a spill (on the Zen 3 corpus's convolutions, register tiles of
    13-16 accumulators of 16 ran at 0.21-0.26x their task's best, 9-12 at 0.51x); 28 fit."""
    assert modes_of_schedule(_tiled(_mm(), 16, 32), znver4_hw) == ("register_spill",)
    assert modes_of_schedule(_tiled(_mm(n=56), 14, 32), znver4_hw) == ()


@pytest.mark.parametrize("bb, mode", [(1, ()), (2, ()), (4, ("no_reuse",)), (12, ("no_reuse",))])
def test_a_register_tile_over_an_axis_every_input_reads_is_no_reuse(znver4_hw, bb, mode):
    """A batched matmul's head axis indexes both inputs: each of its values in the register tile
    loads its own rows of A and B, nothing is reused (on the Zen 3 corpus's depthwise convolutions
    and batched matmuls a tile of 3 or more such values ran at 0.05-0.29x the task's best, and the
    best record had 1 or 2 in 22 of 23 workloads). The tile here: bb heads x 1 row x 32 columns."""
    from tvm.s_tir.schedule import Schedule

    from tests.helpers.workloads import batch_matmul

    sch = Schedule(batch_matmul(12, 64, 64, 64))
    h, i, j, k = sch.get_loops(sch.get_sblock("C"))
    h0, h1 = sch.split(h, [None, bb])
    j0, j1 = sch.split(j, [None, 32])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(h0, i, j0, k0, k1, h1, j1)
    sch.parallel(sch.fuse(h0, i))
    assert loop_shape(sch.mod, znver4_hw).shared_tile == bb
    assert modes_of_schedule(sch, znver4_hw) == mode


def test_a_ragged_vector(znver4_hw):
    """80 columns, 40 at a time: two full vectors and a half (80 itself would have been whole)."""
    assert modes_of_schedule(_tiled(_mm(m=80), 2, 40), znver4_hw) == ("ragged_vector",)


def test_one_core(znver4_hw):
    assert modes_of_schedule(_tiled(_mm(), 4, 32, parallel=False), znver4_hw) == ("one_core",)


def test_rows_split_over_the_cores_while_b_outgrows_the_l2_restream_it(znver4_hw):
    """64 x 1024 x 512: B (2 MB) outgrows the L2 (512 KB on a target that is not this host), A
    (128 KB) does not. The rows split over the cores make every chunk stream all of B again;
    the columns split instead, each chunk streams its own part: no mode."""
    from tvm.s_tir.schedule import Schedule

    assert modes_of_schedule(_tiled(_mm(64, 1024, 512), 4, 32), znver4_hw) == ("restream",)
    sch = Schedule(_mm(64, 1024, 512))
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 32])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(j0, i0, k0, k1, i1, j1)
    sch.parallel(j0)
    assert modes_of_schedule(sch, znver4_hw) == ()
    assert modes_of_schedule(_tiled(_mm(), 4, 32), znver4_hw) == ()  # a B the L2 holds: rows are fine


def test_the_factor_outside_the_reduction_is_not_the_innermost(znver4_hw):
    """j split 32 x 2 with the 32 outside the inner reduction loop: the register tile walks the
    contiguous axis 2 at a time, whatever the outer loop does."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(_mm())
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1, j2 = sch.split(j, [None, 32, 2])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i0, j0, j1, k0, k1, i1, j2)
    sch.parallel(i0)
    assert loop_shape(sch.mod, znver4_hw).inner_factor == 2
    assert modes_of_schedule(sch, znver4_hw) == ("no_simd",)


def test_fused_loops_are_read_through(znver4_hw):
    """i1 and j1 fused into one loop: the contiguous run is still j1's 32."""
    sch = _tiled(_mm(), 4, 32)
    i1, j1 = sch.get_loops(sch.get_sblock("C"))[-2:]
    sch.fuse(i1, j1)
    assert loop_shape(sch.mod, znver4_hw).inner_factor == 32


def test_a_row_too_short_for_a_vector_is_not_a_failure(znver4_hw):
    """7 columns (an NCHW row of a 7x7 feature map): no tile is a whole vector, nothing to avoid."""
    assert modes_of_schedule(_tiled(_mm(m=7), 4, 7), znver4_hw) == ()


def test_a_gemv_contiguous_along_its_reduction_is_not_asked_to_vectorize_its_output(znver4_hw):
    """y[n] = sum_k W[n, k] x[k]: no input is contiguous along n, so n's factor of 1 is no failure."""
    import tvm
    from tvm import te
    from tvm.s_tir.schedule import Schedule

    w = te.placeholder((256, 512), name="W")
    x = te.placeholder((512,), name="X")
    r = te.reduce_axis((0, 512), name="k")
    y = te.compute((256,), lambda n: te.sum(w[n, r] * x[r], axis=r), name="C")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([w, x, y])}))
    n, k = sch.get_loops(sch.get_sblock("C"))
    n0, n1 = sch.split(n, [None, 1])
    sch.parallel(n0)
    shape = loop_shape(sch.mod, znver4_hw)
    assert shape.inner_factor == 1 and not shape.contiguous_input
    assert modes_of(shape, 2) == ()


def test_health_counts_shares_per_mode():
    h = health([(), ("no_simd",), ("no_simd", "register_spill"), ()])
    assert h["n"] == 4 and h["any"] == 0.5 and h["no_simd"] == 0.5 and h["register_spill"] == 0.25
    assert set(MODES) <= set(h) and health([])["any"] is None
