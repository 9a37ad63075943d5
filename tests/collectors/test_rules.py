"""The rule baseline: a valid program for every zoo task, correct when run, no measurement.

Validity over the workloads of the shipped corpus's index (all six zoo models at the seed's
shapes, built for this host and checked by every postprocessor); correctness on small tasks
run here and compared with the unscheduled program (the collectors' checked runner).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from collectors.rules import rule_schedule

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"


@pytest.mark.slow
def test_every_zoo_task_gets_a_valid_rule_schedule(cpu_hw):
    from collectors.tasks import task_from_index
    from storage import Corpus

    with Corpus.open(str(CORPUS)) as corpus:
        tasks = [task_from_index(w) for w in corpus.workloads()]
    assert len(tasks) >= 200
    tiled = 0
    for t in tasks:
        r = rule_schedule(t, cpu_hw)  # raises when no sketch's rule program passes the postprocessors
        assert r.schedule is not None, t.task_name
        tiled += any(isinstance(d, list) and len(d) == 4 for d in r.decisions.values())
    assert tiled >= 50, "matmul and conv2d tasks get multi-level tiles"


@pytest.mark.slow
def test_rule_schedules_of_every_small_zoo_task_compute_the_right_answer(cpu_hw, small_zoo_tasks):
    """A task per structure of the six zoo models' small variants (same operators, small shapes;
    ``one_per_structure``), built, run and checked against the unscheduled program."""
    from collectors.tuner import measure_schedules

    from tests.helpers.workloads import one_per_structure

    unique = {t.workload_key: t for tasks in small_zoo_tasks.values() for t in tasks}
    tasks = one_per_structure(list(unique.values()))
    assert len(tasks) >= 40
    wrong = []
    for task in tasks:
        recs: list = []
        measure_schedules(task, cpu_hw, [rule_schedule(task, cpu_hw).schedule], tuner="rules", on_records=recs.extend)
        if recs[0].error is not None:
            wrong.append((task.task_name, recs[0].error[:200]))
    assert not wrong, wrong


@pytest.mark.slow
def test_rule_schedules_compute_the_right_answer(cpu_hw):
    from collectors.tuner import measure_schedules
    from tests.helpers.workloads import conv_mod, make_task, matmul_relu_mod, pointwise_conv_mod, softmax_mod

    checked = []
    for mod, name, kind in ((matmul_relu_mod(), "fused_matmul_relu", "matmul"), (conv_mod(), "conv2d", "conv2d"),
                            (pointwise_conv_mod(), "conv2d_1x1", "conv2d"), (softmax_mod(), "softmax", "softmax")):
        task = make_task(mod, name, kind)
        r = rule_schedule(task, cpu_hw)
        recs: list = []
        measure_schedules(task, cpu_hw, [r.schedule], tuner="rules", on_records=recs.extend)
        assert len(recs) == 1 and recs[0].error is None and recs[0].latency_s > 0, (name, recs[0].error)
        checked.append(name)
    assert len(checked) == 4


def test_the_same_task_gets_the_same_rule_schedule(cpu_hw):
    from tests.helpers.workloads import make_task, matmul_relu_mod

    task = make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul")
    a, b = rule_schedule(task, cpu_hw), rule_schedule(task, cpu_hw)
    assert a.decisions == b.decisions and a.schedule.mod.script() == b.schedule.mod.script()


def test_cuda_is_refused_with_a_pointer_to_dlight():
    from collectors.hardware import Hardware
    from tests.helpers.workloads import make_task, matmul_relu_mod

    gpu = Hardware(key="cuda-sm_90-test", kind="cuda", arch="sm_90", cores=132, vector_bits=1024,
                   target={"kind": "cuda", "arch": "sm_90"}, description="test")
    with pytest.raises(ValueError, match="dlight"):
        rule_schedule(make_task(matmul_relu_mod(), "mm", "matmul"), gpu)


def test_the_micro_kernel_fills_half_the_registers_with_power_of_two_vector_rows():
    """AVX2 (8 lanes, 16 registers): 2 rows x 4 vectors (4 x 2 ties; the wider wins); AVX-512
    (16 lanes, 32 registers): 4 x 4 vectors; a row of 7 (no whole vector) takes the whole row."""
    from collectors.blocking import micro_kernel

    assert micro_kernel(128, 768, 8, 16) == (2, 32)
    assert micro_kernel(128, 3072, 16, 32) == (4, 64)
    assert micro_kernel(96, 7, 8, 16) == (8, 7)
    assert micro_kernel(1, 1000, 8, 16) == (1, 8)


def test_block_axes_name_the_contiguous_and_the_reuse_axis():
    """A matmul's rows are i (B, the vector-loaded input, does not depend on it); a convolution's
    are its output channels (the input does not depend on them); NCHW's contiguous axis is W."""
    from collectors.block_axes import block_axes
    from tests.helpers.workloads import conv_mod, matmul

    mm = block_axes(matmul(64, 96, 32), "C")
    assert mm.extents == (64, 96, 32) and mm.reduce == (False, False, True) and (mm.vector, mm.rows) == (1, 0)
    conv = block_axes(conv_mod(), "conv2d_nchw")
    assert conv is not None and conv.vector == 3 and conv.rows == 1


def test_a_tiny_task_gets_no_parallel_loop_and_a_large_one_does():
    """A parallel region costs more than the whole of a tiny task (``collectors.threads``): the
    rules write an 8x64x32 matmul (and one with a fused relu) serial, a 256^3 one over the cores."""
    from collectors.failure_modes import loop_shape
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task, matmul, matmul_relu_mod

    hw = fixed_cpu("znver3")
    for mod in (matmul(8, 64, 32), matmul_relu_mod(8, 32, 32)):
        sch = rule_schedule(make_task(mod, "tiny", "matmul"), hw).schedule
        assert loop_shape(sch.mod, hw).parallel == 1
        assert " T.parallel(" not in sch.mod.script()
    big = rule_schedule(make_task(matmul(256, 256, 256), "big", "matmul"), hw).schedule
    assert loop_shape(big.mod, hw).parallel >= 2 * hw.cores


def _spatial_tiles(decisions: dict) -> list[list[int]]:
    return [d for d in decisions.values() if isinstance(d, list) and len(d) == 4]


def test_an_attention_matmul_keeps_each_micro_tile_over_the_whole_reduction():
    """BERT's attention matmul (12 x 128 x 128, K 64): its B micro-panel (64 x 32 floats) fits the
    L1, so the panel plan: nothing in S2 (swept once per outer reduction step: the old plan swept
    a whole 128 x 128 head there, 0.56-0.70x MS@256 on a Zen 3, against 0.96-1.10x now), each
    block of rows a parallel chunk; a dense matmul of K 768, whose panel no L1 holds, keeps the sweep."""
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import batch_matmul, make_task, matmul

    hw = fixed_cpu("znver3")
    bmm = _spatial_tiles(rule_schedule(make_task(batch_matmul(12, 128, 128, 64), "bmm", "matmul"), hw).decisions)
    assert len(bmm) == 3 and all(t[2] == 1 for t in bmm)
    assert bmm[1] == [128 // bmm[1][3], 1, 1, bmm[1][3]]  # the rows: every block in the parallel loop
    dense = _spatial_tiles(rule_schedule(make_task(matmul(128, 768, 768), "dense", "matmul"), hw).decisions)
    assert any(t[2] > 1 for t in dense)


def test_a_row_that_is_not_whole_vectors_is_one_partial_vector_in_the_panel_plan():
    """A 14-wide image row on AVX2 (8 lanes): 8 output channels x 7 lanes, not 4 x 14 (1.75
    vectors: 1.3-1.9x slower on MobileNetV2's 14x14 convolutions in the panel plan)."""
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import conv_mod, make_task

    hw = fixed_cpu("znver3")
    tiles = _spatial_tiles(rule_schedule(make_task(conv_mod(8, 14, 16), "conv2d", "conv2d"), hw).decisions)
    assert [t[3] for t in tiles] == [1, 8, 1, 7]  # n, output channels, image rows, image columns


def test_a_row_that_is_not_whole_vectors_is_one_partial_vector_in_every_plan():
    """A 56-wide image row on AVX-512 (16 lanes) has no multiple of the lanes among its divisors:
    one partial vector of 14, not 28 (1.75 vectors, which LLVM splits into 16 + 8 + 4): ResNet-50's
    3x3 conv2d2 ran 8.0 ms so and 0.95 ms with 16 x 14; GPT-2's 50,257-wide vocabulary matmuls
    6x faster with no vector than with a ragged 29 (Rocket Lake, 2026-12-05, 12 workloads)."""
    from collectors.blocking import micro_kernel
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import conv_mod, make_task

    assert micro_kernel(64, 56, 16, 32) == (16, 14)
    assert micro_kernel(768, 50257, 16, 32)[1] == 1
    hw = fixed_cpu("rocketlake")
    tiles = _spatial_tiles(rule_schedule(make_task(conv_mod(64, 56, 64), "conv2d", "conv2d"), hw).decisions)
    assert tiles[-1][3] == 14  # the image columns' register tile


def test_a_strided_depthwise_convolution_takes_the_window_plan_and_computes_the_right_answer(cpu_hw):
    """Stride 2, one filter per channel: a vector of outputs would gather every other input and no
    row axis reuses it (EfficientNet-B0's 5x5 one ran 3.4x faster without: 355 -> 104 us on a
    Rocket Lake), so no vector, two outputs of a row at a time, the 5x5 window innermost and
    unrolled all the way; stride 1 keeps its vector; the program is right."""
    from collectors.block_axes import block_axes
    from collectors.blocking import unvectorized
    from collectors.tuner import measure_schedules
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import depthwise_conv_mod, make_task

    s2, s1 = depthwise_conv_mod(16, 16, 5, 2), depthwise_conv_mod(16, 16, 5, 1)
    name = "DepthwiseConv2d"
    assert unvectorized(block_axes(s2, name)) and not unvectorized(block_axes(s1, name))
    hw = fixed_cpu("rocketlake")
    r = rule_schedule(make_task(s2, "depthwise", "conv2d"), hw)
    n, c, y, x = _spatial_tiles(r.decisions)
    window = [t for t in r.decisions.values() if isinstance(t, list) and len(t) == 2]
    assert x[3] == 1 and y[3] == 2 and window and all(t[0] == 1 for t in window)
    script = r.schedule.mod.script()  # the write-back of the cached output may be a vector, the window not
    assert all(not script[i:].split('T.sblock("', 1)[1].startswith(f'{name}"') for i in
               [m.start() for m in re.finditer(r"T\.vectorized\(", script)])
    unroll = [int(r.schedule.trace.decisions[i]) for i in r.schedule.trace.insts if i.kind.name == "SampleCategorical"]
    assert unroll == [3]  # the largest unroll of [0, 16, 64, 512]
    assert _spatial_tiles(rule_schedule(make_task(s1, "depthwise", "conv2d"), hw).decisions)[-1][3] > 1
    task = make_task(s2, "depthwise", "conv2d")
    recs: list = []
    measure_schedules(task, cpu_hw, [rule_schedule(task, cpu_hw).schedule], tuner="rules", on_records=recs.extend)
    assert recs[0].error is None and recs[0].latency_s > 0


def test_the_sweep_splits_over_the_cores_the_loop_whose_chunks_read_least_again():
    """A split of a matmul's rows makes every chunk read all of B, of its columns all of A: BERT's
    128 x 3072 x 768 dense layer (B 9 MB) is split over its columns (1.2-1.7x the rows first on a
    Rocket Lake), a tall 3072 x 128 one over its rows."""
    from tests.helpers.corpora import fixed_cpu
    from collectors.block_axes import block_axes
    from tests.helpers.workloads import make_task, matmul

    hw = fixed_cpu("rocketlake")
    assert block_axes(matmul(128, 3072, 768), "C").reread == (768 * 3072, 128 * 768, 0)
    wide = _spatial_tiles(rule_schedule(make_task(matmul(128, 3072, 768), "wide", "matmul"), hw).decisions)
    assert wide[0][0] == 1 and wide[1][0] > 1
    tall = _spatial_tiles(rule_schedule(make_task(matmul(3072, 128, 768), "tall", "matmul"), hw).decisions)
    assert tall[0][0] > 1 and tall[1][0] == 1


def test_an_avx512_matmul_sweep_takes_eight_rows_of_two_vectors_and_a_deeper_inner_reduction():
    """On 32 vector registers BERT's dense matmuls ran 1.13-1.15x with 8 x 32 accumulators and kc
    16 than with the 4 x 64 the FMAs-per-load rule picks at kc 8 (which AVX2's 16 registers keep)."""
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task, matmul

    def tiles(mcpu: str) -> list[list[int]]:
        hw = fixed_cpu(mcpu)
        decisions = rule_schedule(make_task(matmul(128, 3072, 768), "dense", "matmul"), hw).decisions
        return [d for d in decisions.values() if isinstance(d, list) and len(d) in (2, 4)]

    i, j, k = tiles("rocketlake")
    assert (i[3], j[3], k[1]) == (8, 32, 16)
    i, j, k = tiles("znver3")
    assert k[1] <= 8 and i[3] * j[3] // 8 <= 8  # AVX2: half of 16 registers, kc at most 8


def test_the_inner_reduction_cap_is_a_knob_of_its_own_and_the_tall_sweep_doubles_it():
    """``inner_reduction`` (a second opinion, ``VARIANTS``) caps kc where the plan would take
    ``INNER_REDUCTION`` (the cache blocks sized from kc may follow; on these shapes nothing else
    moves); ViT's 197-row dense (a one-row kernel) takes it as asked, the AVX-512 tall sweep twice
    it; below 1 it is refused."""
    from collectors.rules import VARIANTS
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task, matmul

    hw = fixed_cpu("rocketlake")
    for (m, k), kc in (((197, 3072), (8, 6)), ((128, 3072), (16, 12))):
        task = make_task(matmul(m, k, 768), "dense", "matmul")
        base, capped = rule_schedule(task, hw).decisions, rule_schedule(task, hw, inner_reduction=6).decisions
        red = [i for i, d in base.items() if isinstance(d, list) and len(d) == 2]
        assert [base[i][1] for i in red] == [kc[0]] and [capped[i][1] for i in red] == [kc[1]]
        assert {i: d for i, d in capped.items() if i not in red} == {i: d for i, d in base.items() if i not in red}
    assert {"inner_reduction": 6} in VARIANTS
    with pytest.raises(ValueError, match="inner_reduction must be at least 1, got 0"):
        rule_schedule(task, hw, inner_reduction=0)


def test_the_sweeps_parallel_chunks_per_core_are_a_knob_and_the_micro_tile_stays():
    """``chunks_per_core`` sets how many parallel chunks per core the sweep's outer level S0 aims
    for (BERT's 128 x 768 -> 3072 dense on a 2-core AVX-512: 96 columns of micro-tiles, 12 chunks
    by default, the largest divisor up to 16; 2 at one); what a chunk no longer holds moves to its
    sweep, the micro-tile and kc stay; below 1 it is refused."""
    from collectors.rules import VARIANTS
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task, matmul

    hw = fixed_cpu("rocketlake")
    task = make_task(matmul(128, 768, 3072), "dense", "matmul")
    base, coarse = rule_schedule(task, hw).decisions, rule_schedule(task, hw, chunks_per_core=1).decisions
    spatial = sorted(i for i, d in base.items() if isinstance(d, list) and len(d) == 4)
    assert [math.prod(base[i][0] for i in spatial), math.prod(coarse[i][0] for i in spatial)] == [12, 2]
    for i in spatial:
        assert base[i][3] == coarse[i][3] and math.prod(base[i]) == math.prod(coarse[i])
    assert {i: d for i, d in coarse.items() if i not in spatial} == {i: d for i, d in base.items() if i not in spatial}
    assert {"chunks_per_core": 1, "inner_reduction": 16} in VARIANTS  # a second opinion
    with pytest.raises(ValueError, match="chunks_per_core must be at least 1, got 0"):
        rule_schedule(task, hw, chunks_per_core=0)


def _packed_or_not(m: int, n: int, k: int, free: list[int], hw: object, **options: object) -> tuple[bool, dict]:
    """``(B read packed, the rules' decisions)`` of a matmul of ``m`` rows, ``n`` columns and a
    ``k``-deep reduction whose parameters ``free`` are layout-free (a deployer's prepacked weight is
    parameter 1); ``options`` go to ``rule_schedule``."""
    from collectors.block_axes import block_axes
    from tests.helpers.workloads import make_task, matmul

    mod = matmul(m, n, k)
    mod = type(mod)({"main": mod["main"].with_attr("layout_free_buffers", free)}) if free else mod
    return block_axes(mod, "C").packed, rule_schedule(make_task(mod, "dense", "matmul"), hw, **options).decisions


def _tiles(decisions: dict) -> list[list[int]]:
    """The tile decisions, outer loops first (a matmul's rows, columns, reduction)."""
    return [d for d in decisions.values() if isinstance(d, list)]


def test_a_packed_weight_lifts_the_inner_reduction_cap_to_the_l1_rule():
    """A layout-free B (a deployer's prepacked weight) is stored in the order the tiles walk, so
    its kc rows no longer share an L1 set: kc as deep as both micro-panels fit half the L1 (64 on
    BERT's 768 x 3072 dense against 16 unpacked: 2.01 -> 1.79-1.87 ms, Rocket Lake), where the
    sweep stays (a chunk's share of B beyond half the L2: GPT-2's LM head). A layout-free A alone
    (not the vector-loaded input) changes nothing."""
    from tests.helpers.corpora import fixed_cpu

    hw = fixed_cpu("rocketlake")

    def kc_of(free: list[int]) -> tuple[bool, int]:
        packed, decisions = _packed_or_not(128, 50304, 768, free, hw)
        return packed, next(d[1] for d in decisions.values() if isinstance(d, list) and len(d) == 2)

    assert kc_of([]) == (False, 16) and kc_of([0]) == (False, 16)
    assert kc_of([1]) == (True, 64)


def test_a_packed_weight_whose_chunks_fit_the_l2_keeps_each_micro_tile_over_the_whole_reduction():
    """Under AVX-512's tall micro-tile a packed B takes no sweep: each 8 x 32 micro-tile's
    accumulators are held over the whole reduction at kc ``INNER_REDUCTION``, the row blocks in S1,
    the parallel chunks over the columns (BERT's packed 768 -> 768 dense 1.04-1.1x the kc 64 sweep,
    its 768 -> 3072 one 1.1-1.47x, Rocket Lake); the forced sweep keeps a block of micro-tiles."""
    from collectors.blocking import INNER_REDUCTION
    from tests.helpers.corpora import fixed_cpu

    hw = fixed_cpu("rocketlake")
    packed, resident = _packed_or_not(128, 768, 768, [1], hw)
    assert packed and _tiles(resident) == [[1, 16, 1, 8], [12, 2, 1, 32], [768 // INNER_REDUCTION, INNER_REDUCTION]]
    swept = _tiles(_packed_or_not(128, 768, 768, [1], hw, blocking="sweep")[1])
    assert [t[2] for t in swept[:2]] != [1, 1]  # the sweep: a block of micro-tiles in S2


def test_an_unpacked_weight_is_resident_only_where_a_chunks_rows_fit_a_quarter_of_the_l2_in_distinct_sets(monkeypatch):
    """An unpacked B's rows lie a row apart: the resident plan holds where a chunk's share of them
    fits a quarter of the L2 and no L2 set takes more of their lines than half its ways (Rocket
    Lake, 2 MB, 16 ways, two calls each: 128 x 768 x 768 1.12-1.21x the sweep; rows 4 KB apart,
    1024 wide, 0.55x though 256 KB; 768 deep x 3072 wide, 590 KB a chunk, 0.5x)."""
    import collectors.blocking as blocking
    from collectors.blocking import INNER_REDUCTION
    from tests.helpers.corpora import fixed_cpu

    monkeypatch.setattr(blocking, "l2_bytes", lambda hw: 2 * 1024 * 1024)  # the host's caches, wherever it runs
    monkeypatch.setattr(blocking, "l2_ways", lambda hw: 16)
    hw = fixed_cpu("rocketlake")
    packed, resident = _packed_or_not(128, 768, 768, [], hw)
    assert not packed and _tiles(resident) == [[1, 16, 1, 8], [12, 2, 1, 32], [768 // INNER_REDUCTION, INNER_REDUCTION]]
    for n, k in ((1024, 1024), (3072, 768), (768, 3072)):
        swept = _tiles(_packed_or_not(128, n, k, [], hw)[1])
        assert [t[2] for t in swept[:2]] != [1, 1], (n, k)  # the sweep: a block of micro-tiles in S2


def test_a_packed_weight_split_over_its_rows_is_resident_only_where_all_of_it_fits_half_the_l2():
    """Split over the cores by its rows (B the smaller input: 2048 x 3072 -> 256), every chunk
    reads all of B (3 MB) again for each block of rows: the sweep stays (kc from the L1 rule, not
    ``INNER_REDUCTION``). The resident rule once took a chunk's share of B as if the columns were
    split, 8 ways here: 393 KB, under half of a 2 MB L2."""
    from collectors.blocking import INNER_REDUCTION
    from tests.helpers.corpora import fixed_cpu

    packed, decisions = _packed_or_not(2048, 256, 3072, [1], fixed_cpu("rocketlake"))
    tiles = [d for d in decisions.values() if isinstance(d, list)]
    assert packed and tiles[0][0] > 1 and tiles[1][0] == 1  # the rows take the cores' chunks
    assert tiles[2][1] > INNER_REDUCTION


def test_a_convolution_that_takes_no_panel_plan_keeps_its_micro_tiles_over_a_deep_reduction():
    """The sweep reloads its accumulators every kc steps and a convolution's kc was 6 (ResNet-50's
    3x3 conv2d10: 2.75 ms; 0.87 ms so, on a Rocket Lake): no S2 block, kc beyond INNER_REDUCTION."""
    from collectors.block_axes import block_axes
    from collectors.blocking import INNER_REDUCTION, blocked_plan, l1_bytes, panel_fits
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import conv_mod

    axes = block_axes(conv_mod(256, 14, 256), "conv2d_nchw")  # ResNet-50's 3x3 conv2d18 at stride 1
    for mcpu in ("rocketlake", "znver3"):
        hw = fixed_cpu(mcpu)
        plan = blocked_plan(axes, hw)
        assert not panel_fits(256 * 9, plan[axes.vector][3], l1_bytes(hw))
        assert all(plan[i][2] == 1 for i, r in enumerate(axes.reduce) if not r)
        assert math.prod(plan[i][1] for i, r in enumerate(axes.reduce) if r) > INNER_REDUCTION
        sweep = blocked_plan(axes, hw, plan_kind="sweep")  # a forced sweep stays what it was
        assert math.prod(sweep[i][1] for i, r in enumerate(axes.reduce) if r) <= INNER_REDUCTION


def test_a_pointwise_convolution_on_a_7x7_image_vectorizes_each_channels_whole_plane():
    """MobileNetV2's conv2d28 (1x1, 960 -> 320 at 7 x 7): the rules' micro-kernel of 16 channels x
    one 7-wide row filled 7 of AVX-512's 16 lanes (331 us on an Emerald Rapids; MS@256 178 us);
    each channel's 49 outputs as one run, a block of channels in half the L1, 167 us. Not where
    the row fills its vector as well (AVX2: 7 of 8), nor on a 3x3 convolution (its plane is read
    at the taps' offsets)."""
    from collectors.block_axes import block_axes
    from collectors.blocking import INNER_REDUCTION, blocked_plan, l1_bytes, whole_plane
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import conv_mod, make_task, pointwise_conv_mod

    avx512, avx2 = fixed_cpu("rocketlake"), fixed_cpu("znver3")
    axes = block_axes(pointwise_conv_mod(960, 7, 320), "conv2d_nchw")
    assert axes.plane == axes.vector - 1 and whole_plane(axes, 16) and not whole_plane(axes, 8)
    plan = blocked_plan(axes, avx512)
    assert plan[axes.plane] == [1, 1, 1, 7] and plan[axes.vector] == [1, 1, 1, 7]
    _, chunks, block, inner = plan[axes.rows]
    assert inner == 1 and block * 49 * 4 <= l1_bytes(avx512) // 2 and chunks >= avx512.cores and chunks * block == 320
    assert max(plan[i][1] for i, r in enumerate(axes.reduce) if r) == INNER_REDUCTION
    for before in (blocked_plan(axes, avx512, planes=False), blocked_plan(axes, avx2)):
        assert before[axes.vector][3] == 7 and before[axes.plane][3] == 1 and before[axes.rows][3] > 1
    assert block_axes(conv_mod(64, 7, 64), "conv2d_nchw").plane is None
    task = make_task(pointwise_conv_mod(960, 7, 320), "conv2d28", "conv2d")
    tiles = [d for d in rule_schedule(task, avx512).decisions.values() if isinstance(d, list) and len(d) == 4]
    assert tiles.count([1, 1, 1, 7]) == 2


def test_a_one_row_micro_tile_sweeps_one_column_block_so_its_accumulators_stay_in_the_l1():
    """ViT's 197 tokens are prime: a one-row micro-tile of four vectors, kc 8; three column blocks
    in S2 reloaded 148 KB of accumulators every 8 steps (5.3 ms), one block 3.4-3.7 ms (Rocket
    Lake). A taller tile (BERT's 128 rows) keeps its wider block."""
    from collectors.block_axes import block_axes
    from collectors.blocking import blocked_plan
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import matmul

    hw = fixed_cpu("rocketlake")
    vit, bert = (block_axes(matmul(m, 3072, 768), "C") for m in (197, 128))
    p = blocked_plan(vit, hw)
    assert p[vit.rows][3] == 1 and p[vit.vector][2] == 1 and p[vit.vector][3] == 64
    q = blocked_plan(bert, hw)
    assert q[bert.rows][3] > 1 and q[bert.vector][2] > 1


def test_a_reduction_with_no_small_divisor_takes_the_panel_plan():
    """ViT's attention-times-values (K = 197 tokens, prime) would leave the sweep one reduction
    step deep, re-sweeping its block 197 times (19% of peak on a Rocket Lake; the panel 54%)."""
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import batch_matmul, make_task

    hw = fixed_cpu("rocketlake")
    prime = _spatial_tiles(rule_schedule(make_task(batch_matmul(12, 64, 64, 1031), "bmm", "matmul"), hw).decisions)
    assert all(t[2] == 1 for t in prime)
    even = _spatial_tiles(rule_schedule(make_task(batch_matmul(12, 64, 64, 1024), "bmm", "matmul"), hw).decisions)
    assert [t[3] for t in even] == [1, 8, 32]  # no panel: AVX-512's tall 8 x 32 micro-tile (the resident plan)


def _row_max(rows: int, k: int):
    import tvm
    from tvm import te

    a = te.placeholder((rows, k), name="A")
    r = te.reduce_axis((0, k), name="k")
    return tvm.IRModule({"main": te.create_prim_func([a, te.compute((rows,), lambda i: te.max(a[i, r], axis=r),
                                                                       name="B")])})


def test_a_reduction_of_two_vectors_or_less_is_not_split_across_the_cores():
    """A 3x3 max pool's reduction (9 elements) split by MetaSchedule's rfactor sketch ran 1.7-2.0x
    slower than unsplit (Rocket Lake); a 250-element row max keeps the split sketch (every
    longer reduction of the zoo, unsplit, ran 0.70x). A prime length has no split to give but
    one step or one partial result each: ViT's 197-long softmax ran 1.20-1.28x unsplit and its
    mask max 1.09x."""
    from tests.helpers.corpora import fixed_cpu
    from collectors.sketches import design_space
    from collectors.tir import as_module
    from tests.helpers.workloads import make_task

    hw = fixed_cpu("rocketlake")

    def rfactors(trace) -> bool:
        return any(inst.kind.name == "RFactor" for inst in trace.insts)

    for k, split in ((9, False), (250, True), (197, False)):
        mod = _row_max(50176 if k == 9 else 1500, k)
        assert any(rfactors(sk.trace) for sk in design_space(as_module(mod), hw)), "the space offers the split"
        assert rfactors(rule_schedule(make_task(mod, "row_max", "reduction"), hw).schedule.trace) == split


def test_an_rfactor_split_balances_its_two_passes():
    """The rfactor split of a K-long reduction into K/f steps of f partial results, then f added
    up: each pass is a chain of dependent steps, so f is the divisor nearest sqrt(K) (56 of a
    56 x 56 image's 3,136: EfficientNet-B0's global average pools ran 11.8-11.9x the largest
    divisor up to 8; Whisper's 250-long mask max 2.0x with 25; Rocket Lake, bench.studies.reductions)."""
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task

    hw = fixed_cpu("rocketlake")
    for k, f in ((3136, 56), (250, 25), (49, 7)):
        sch = rule_schedule(make_task(_row_max(256, k), "row_max", "reduction"), hw)
        assert any(inst.kind.name == "RFactor" for inst in sch.schedule.trace.insts)
        splits = [d for d in sch.decisions.values() if isinstance(d, list) and len(d) == 2]
        assert splits == [[k // f, f]], (k, splits)


def test_panel_fits_only_a_vector_panel_the_l1_holds():
    from collectors.blocking import panel_fits

    assert panel_fits(64, 32, 32 * 1024)
    assert not panel_fits(768, 32, 32 * 1024)  # 96 KB
    assert not panel_fits(64, 1, 32 * 1024)  # no vector: nothing for the rows to reuse


def _location(schedule) -> int:
    trace = schedule.trace
    return next(int(trace.decisions[i]) for i in trace.insts if i.kind.name == "SampleComputeLocation")


def test_a_pad_is_never_inlined_by_the_rules_and_the_programs_compute_the_right_answer(cpu_hw):
    """The pad's ``if_then_else`` inlined into the convolution's loads ran 0.15-0.28x the best
    record (Rocket Lake corpus), and the rules kept whatever location the design space drew: a
    regular convolution now pads once at the root, a depthwise one each channel's plane at the
    channel loop (no image loop above it)."""
    from tvm.s_tir.schedule import Schedule

    from collectors.rules import INLINE, ROOT
    from collectors.tir import as_module
    from collectors.tuner import measure_schedules
    from tests.helpers.workloads import conv_mod, depthwise_conv_mod, make_task

    regular = make_task(conv_mod(8, 14, 16), "conv", "conv2d")
    depthwise = make_task(depthwise_conv_mod(16, 16, 5, 1), "depthwise", "conv2d")
    assert _location(rule_schedule(regular, cpu_hw).schedule) == ROOT
    where = _location(rule_schedule(depthwise, cpu_hw).schedule)
    assert where not in (ROOT, INLINE)
    dw = Schedule(as_module(depthwise.mod))  # the sketch replayed before postprocessing: the loops the decision indexes
    rule_schedule(depthwise, cpu_hw).schedule.trace.apply_to_schedule(dw, remove_postproc=True)
    loop = dw.get(dw.get_loops(dw.get_sblock("DepthwiseConv2d"))[where])
    assert loop.loop_var.name.rsplit("_", 1)[0] in ("b", "c")  # the batch or channel loop
    for task in (regular, depthwise):
        recs: list = []
        measure_schedules(task, cpu_hw, [rule_schedule(task, cpu_hw).schedule], tuner="rules", on_records=recs.extend)
        assert recs[0].error is None and recs[0].latency_s > 0, (task.task_name, recs[0].error)


def test_the_rules_program_of_a_padded_convolution_stays_in_its_sketchs_language(cpu_hw):
    """Choosing the pad's location must record nothing in the trace: a GetConsumers left there made
    the rules' program of every padded convolution unencodable, so it dropped out of the served
    pool (Whisper's conv1d: 15.6 ms served against the rules' 2.5 ms)."""
    from tlm.language import encode
    from tests.helpers.workloads import conv_mod, depthwise_conv_mod, make_task

    for mod in (conv_mod(8, 14, 16), depthwise_conv_mod(16, 16, 5, 1)):
        task = make_task(mod, "padded", "conv2d")
        r = rule_schedule(task, cpu_hw)
        assert encode(task, cpu_hw, r.schedule.trace).decisions


def test_the_sketch_draw_of_compute_locations_stays_on_request_and_unknown_choices_are_refused(cpu_hw):
    from collectors.sketches import design_space
    from collectors.tir import as_module
    from tests.helpers.workloads import depthwise_conv_mod, make_task

    task = make_task(depthwise_conv_mod(16, 16, 5, 1), "depthwise", "conv2d")
    r = rule_schedule(task, cpu_hw, locations="sketch")
    assert _location(r.schedule) == _location(design_space(as_module(task.mod), cpu_hw)[r.sketch_index])
    with pytest.raises(ValueError, match="unknown compute locations 'inline'.*rule, sketch"):
        rule_schedule(task, cpu_hw, locations="inline")


def test_the_unroll_step_is_the_one_asked_for_and_one_no_sketch_samples_is_refused(cpu_hw):
    from tests.helpers.workloads import make_task, matmul_relu_mod

    task = make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul")
    for step in (16, 512):
        sch = rule_schedule(task, cpu_hw, unroll=step).schedule
        steps = re.findall(r"pragma_auto_unroll_max_step=(\d+)|\"pragma_auto_unroll_max_step\": (\d+)", sch.mod.script())
        assert {int(a or b) for a, b in steps} == {step}
    with pytest.raises(ValueError, match="unroll step 100 is none a sketch samples; one of 0, 16, 64, 512"):
        rule_schedule(task, cpu_hw, unroll=100)


def test_the_rules_variants_start_with_the_rules_program_and_are_refused_when_unknown(cpu_hw):
    from collectors.rules import rule_variants
    from tests.helpers.workloads import make_task, matmul_relu_mod

    task = make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul")
    own, *others = rule_variants(task, cpu_hw, ({"unroll": 512}, {"blocked": False}))
    assert own.schedule.mod.script() == rule_schedule(task, cpu_hw).schedule.mod.script()
    assert [o.schedule.mod.script() for o in others] == [
        rule_schedule(task, cpu_hw, unroll=512).schedule.mod.script(),
        rule_schedule(task, cpu_hw, blocked=False).schedule.mod.script()]
    with pytest.raises(ValueError, match="unknown blocked plan 'blis'"):
        rule_variants(task, cpu_hw, ({"blocking": "blis"},))


def test_an_unknown_blocked_plan_is_refused(cpu_hw):
    from tests.helpers.workloads import make_task, matmul

    with pytest.raises(ValueError, match="unknown blocked plan 'blis'.*auto, sweep, panel"):
        rule_schedule(make_task(matmul(), "mm", "matmul"), cpu_hw, blocking="blis")


@pytest.mark.slow
def test_every_blocked_plan_computes_the_right_answer(cpu_hw):
    from collectors.blocking import PLANS
    from collectors.tuner import measure_schedules
    from tests.helpers.workloads import batch_matmul, conv_mod, make_task

    for mod, name in ((batch_matmul(4, 32, 64, 16), "bmm"), (conv_mod(8, 14, 16), "conv2d")):
        task = make_task(mod, name, "matmul" if name == "bmm" else "conv2d")
        for plan in PLANS[1:]:
            recs: list = []
            measure_schedules(task, cpu_hw, [rule_schedule(task, cpu_hw, blocking=plan).schedule], tuner="rules",
                              on_records=recs.extend)
            assert recs[0].error is None and recs[0].latency_s > 0, (name, plan, recs[0].error)


def test_the_cache_sizes_are_the_hosts_only_for_the_hosts_kind_of_cpu(cpu_hw):
    """Rules written here for another key (a Zen 3's, on whatever CI runs) do not take this host's
    L1 and L2: the blocking would then depend on the machine that wrote it."""
    from collectors.blocking import DEFAULT_L1_BYTES, DEFAULT_L2_BYTES, l1_bytes, l2_bytes
    from tests.helpers.corpora import fixed_cpu

    other = "znver3" if cpu_hw.target.get("mcpu") != "znver3" else "rocketlake"
    hw = fixed_cpu(other)
    assert (l1_bytes(hw), l2_bytes(hw)) == (DEFAULT_L1_BYTES, DEFAULT_L2_BYTES)
    assert l1_bytes(cpu_hw) > 0 and l2_bytes(cpu_hw) >= l1_bytes(cpu_hw)


def test_a_row_of_no_vector_keeps_few_rows_in_the_micro_tile_unless_the_output_axis_is_one_wide():
    """GPT-2's 50,257-wide vocabulary has no divisor up to the lanes: its micro-tile's row is one
    scalar, and 16 rows innermost were vectorized into gathers (Rocket Lake: 467 ms; 2 rows
    112 ms). A one-wide output axis (a squeeze convolution's 1 x 1 image) keeps its rows."""
    from collectors.blocking import SCALAR_ROWS, micro_kernel
    from tests.helpers.corpora import fixed_cpu

    rows, cols, _ = _tiles(_packed_or_not(128, 50257, 768, [], fixed_cpu("rocketlake"))[1])
    assert cols[3] == 1 and 1 < rows[3] <= SCALAR_ROWS
    assert micro_kernel(128, 1, 16, 32)[0] > SCALAR_ROWS


def test_a_panel_plans_rows_go_serial_where_each_block_of_them_would_reread_more_than_half_the_l2(monkeypatch):
    """A 1x1 convolution's rows are its output channels: as parallel chunks each block of them
    re-read the whole image (ResNet-50's 256 -> 128 channels on 56 x 56: 3.2 MB, eight times;
    1.75x once serial, Rocket Lake). An image within half the L2 keeps them parallel
    (EfficientNet-B0's 16 -> 96 channels on 112 x 112, 784 KB: 0.7x serial)."""
    import collectors.blocking as blocking
    from collectors.block_axes import block_axes
    from collectors.blocking import blocked_plan
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import pointwise_conv_mod

    monkeypatch.setattr(blocking, "l2_bytes", lambda hw: 2 * 1024 * 1024)  # a Rocket Lake's L2, wherever it runs
    hw = fixed_cpu("rocketlake")
    big = block_axes(pointwise_conv_mod(256, 56, 128), "conv2d_nchw")
    plan = blocked_plan(big, hw)
    assert plan[big.rows][:2] == [1, 128 // plan[big.rows][3]] and plan[2][0] == 56  # the image rows take the cores
    small = block_axes(pointwise_conv_mod(16, 112, 96), "conv2d_nchw")
    assert blocked_plan(small, hw)[small.rows][1] == 1  # every block of channels a parallel chunk
