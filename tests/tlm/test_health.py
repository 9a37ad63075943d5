"""Healthy decoding (``tlm.language.health``): tile factors that keep a written CPU program out of
the static failure modes, checked against the failure modes read from the scheduled TIR
(``collectors.failure_modes``), an independent reading of the same rules. Fixed targets (an AVX2
Zen 3 with 16 registers, an AVX-512 Zen 4 with 32), so the test holds on any host."""
from __future__ import annotations

import random

import pytest

from collectors.failure_modes import modes_of_schedule
from collectors.hardware import hardware_from_index
from tests.helpers.workloads import batch_matmul, make_task, matmul, matmul_relu_mod
from tlm.language import EOS, apply_sentence, build_space, legal_next_tokens, prompt_tokens
from tlm.language.health import tiling_of

#: the modes healthy decoding rules out (one core is the parallel annotation's, not a tile's)
RULED_OUT = {"no_simd", "short_vector", "ragged_vector", "register_spill", "no_reuse"}


def _hw(mcpu: str):
    return hardware_from_index(f"cpu-{mcpu}-2c", {"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


def _conv_nchw(width: int = 32):
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, 32, width, width), name="X")
    w = te.placeholder((64, 32, 3, 3), name="W")
    return tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.conv2d_nchw(x, w, 1, 1, 1)])})


def _walk(task, hw, sketch, rng, healthy):
    space = build_space(task, hw)
    words = prompt_tokens(space, sketch)
    while words[-1] != EOS:
        words.append(rng.choice(sorted(legal_next_tokens(words, task, hw, healthy=healthy))))
    return words


def _modes(task, hw, words):
    return set(modes_of_schedule(apply_sentence(words, task, hw).schedule, hw))


def _depthwise_nchw(channels: int = 64, width: int = 28):
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, channels, width, width), name="X")
    w = te.placeholder((channels, 1, 3, 3), name="W")
    return tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.depthwise_conv2d_nchw(x, w, 1, 1, 1)])})


TASKS = {
    "matmul": lambda: make_task(matmul(256, 256, 256), "matmul", "matmul"),
    "batch_matmul": lambda: make_task(batch_matmul(12, 128, 64, 128), "batch_matmul", "matmul"),
    "depthwise_conv2d": lambda: make_task(_depthwise_nchw(), "depthwise_conv2d", "conv2d"),
    "fused_matmul_relu": lambda: make_task(matmul_relu_mod(64, 96, 128), "fused_matmul_relu", "matmul"),
    "conv2d": lambda: make_task(_conv_nchw(32), "conv2d", "conv2d"),
}


@pytest.mark.parametrize("mcpu", ["znver3", "znver4"])
@pytest.mark.parametrize("name", sorted(TASKS))
def test_healthy_walks_are_free_of_the_ruled_out_modes(name, mcpu):
    """Random walks through the healthy legal words give programs the TIR reading finds in none of
    the ruled-out modes, on every sketch; the plain walks of the same tasks do fall into them (so
    the rule is what removes them, not the task)."""
    task, hw = TASKS[name](), _hw(mcpu)
    space = build_space(task, hw)
    rng = random.Random(0)
    plain_bad = 0
    for i in range(12):
        sk = space.sketches[i % len(space.sketches)]
        assert tiling_of(space, sk) is not None
        words = _walk(task, hw, sk, rng, healthy=True)
        assert not _modes(task, hw, words) & RULED_OUT, " ".join(words[-30:])
        plain_bad += bool(_modes(task, hw, _walk(task, hw, sk, rng, healthy=False)) & RULED_OUT)
    assert plain_bad >= 3


def test_a_gemv_like_layout_is_not_asked_to_vectorize_its_output():
    """NT matmul: B is read along the reduction, no input is contiguous along the output's stride-1
    axis, so an innermost factor of 1 there stays legal (the failure modes do not count it)."""
    task, hw = make_task(matmul(64, 64, 64, transpose_b=True), "matmul_nt", "matmul"), _hw("znver3")
    space = build_space(task, hw)
    tiling = tiling_of(space, space.sketches[0])
    assert tiling is not None and not tiling.vectorize
    nn = tiling_of(build_space(make_task(matmul(64, 64, 64), "matmul", "matmul"), hw),
                   build_space(make_task(matmul(64, 64, 64), "matmul", "matmul"), hw).sketches[0])
    assert nn.vectorize and nn.lanes == 8 and nn.registers == 12  # of 16: four hold the operands


def test_healthy_words_are_a_subset_and_reading_stays_unconstrained():
    """Every healthy word is legal; a plain program the rule would not write (innermost factor 1
    on the stride-1 axis) still reads back exactly: reading never applies the rule."""
    task, hw = TASKS["matmul"](), _hw("znver3")
    space = build_space(task, hw)
    sk = space.sketches[0]
    rng = random.Random(1)
    found = None
    for _ in range(40):
        words = _walk(task, hw, sk, rng, healthy=False)
        if "no_simd" in _modes(task, hw, words):
            found = words
            break
    assert found is not None
    plen = len(prompt_tokens(space, sk))
    refused = None  # the first word healthy decoding would not have written
    for i in range(plen, len(found)):
        plain = legal_next_tokens(found[:i], task, hw)
        healthy = legal_next_tokens(found[:i], task, hw, healthy=True)
        assert healthy <= plain and healthy
        if found[i] not in healthy:
            refused = i
            break
    assert refused is not None and found[-1] == EOS
    assert apply_sentence(found, task, hw).schedule is not None


def test_no_healthy_value_leaves_the_legal_ones():
    """A matmul whose axes have no multiple of the lanes (7 x 7 x 7): the vector rule cannot hold,
    so it drops out instead of leaving no legal word; every walk finishes valid."""
    task, hw = make_task(matmul(7, 7, 7), "matmul7", "matmul"), _hw("znver4")
    space = build_space(task, hw)
    rng = random.Random(2)
    for sk in space.sketches:
        words = _walk(task, hw, sk, rng, healthy=True)
        assert apply_sentence(words, task, hw).schedule is not None


def _parallel(task, hw, words) -> int:
    from collectors.failure_modes import loop_shape

    return loop_shape(apply_sentence(words, task, hw).schedule.mod, hw).parallel


def test_a_tiny_task_is_written_serial_and_a_large_one_many_ways_parallel():
    """The ``parallel`` rule, read back from the scheduled TIR: a 8x64x32 matmul (16k FLOPs, less
    work than starting a parallel region saves) is written with no parallel loop on every sketch;
    a 256^3 matmul and a 32x32 convolution at least ``WAYS_PER_CORE x cores`` ways parallel on
    every sketch (the fused sketches included, whose compute-at level ends the postproc's fusion);
    without the rule, walks do otherwise."""
    from collectors.threads import WAYS_PER_CORE
    from tlm.language.health import RULES

    hw = _hw("znver3")
    rng = random.Random(3)
    tiny = make_task(matmul(8, 64, 32), "matmul_tiny", "matmul")
    space = build_space(tiny, hw)
    assert {tiling_of(space, sk).parallel for sk in space.sketches} == {1}
    plain_parallel = 0
    for sk in space.sketches:
        for _ in range(3):
            assert _parallel(tiny, hw, _walk(tiny, hw, sk, rng, healthy=True)) == 1
            plain_parallel += _parallel(tiny, hw, _walk(tiny, hw, sk, rng, healthy=RULES - {"parallel"})) > 1
    assert plain_parallel >= 3
    want = WAYS_PER_CORE * hw.cores
    for task in (TASKS["matmul"](), TASKS["conv2d"]()):
        space = build_space(task, hw)
        for sk in space.sketches:
            assert tiling_of(space, sk).parallel == want
            for _ in range(3):
                assert _parallel(task, hw, _walk(task, hw, sk, rng, healthy=True)) >= want


def test_the_parallel_target_follows_the_work_and_the_cores():
    """Serial below one region's saving, ``WAYS_PER_CORE x cores`` ways for real work, fewer when
    the chunks would be short, no opinion on one core; an unknown rule name is refused."""
    from collectors.threads import PARALLEL_REGION_S, SERIAL_FLOPS_PER_S, WAYS_PER_CORE, parallel_target
    from tlm.language.health import rules_of

    assert parallel_target(16_000, 10_000, 2) == 1
    assert parallel_target(200e6, 10_000_000, 2) == WAYS_PER_CORE * 2
    assert parallel_target(200e6, 10_000_000, 8) == WAYS_PER_CORE * 8
    mid = parallel_target(SERIAL_FLOPS_PER_S * 6 * PARALLEL_REGION_S, 0, 2)  # one core: 6 regions' time
    assert 2 <= mid < WAYS_PER_CORE * 2
    assert parallel_target(200e6, 10_000_000, 1) == 0
    with pytest.raises(ValueError, match="unknown healthy rule"):
        rules_of({"vectors"})


def test_a_matmul_whose_b_outgrows_the_l2_is_split_over_its_columns():
    """The ``reread`` rule: a 64 x 1024 x 512 matmul's B (2 MB) outgrows the L2 (512 KB on a
    target that is not this host), its A (128 KB) does not, so the rows stay out of the parallel
    loop (each chunk would stream all of B again: the TIR reading's ``restream``) and the columns
    give the cores their chunks; without the rule, walks split the rows over the cores."""
    from collectors.threads import WAYS_PER_CORE
    from tlm.language.health import RULES

    hw = _hw("znver4")
    task = make_task(matmul(64, 1024, 512), "matmul_wide", "matmul")
    space = build_space(task, hw)
    rng = random.Random(4)

    def row_split(words, tiling) -> int:
        program = apply_sentence(words, task, hw)
        insts, decisions = list(program.trace.insts), program.trace.decisions
        rows = next(s for s in tiling.spatial if s != tiling.axis)
        return int(list(decisions[insts[rows]])[0])  # the first level: always in the parallel loop

    split_without = restreamed = 0
    for sk in space.sketches:
        tiling = tiling_of(space, sk)
        rows = next(s for s in tiling.spatial if s != tiling.axis)
        assert tiling.restreams(rows) and not tiling.restreams(tiling.axis)
        for _ in range(3):
            words = _walk(task, hw, sk, rng, healthy=True)
            assert row_split(words, tiling) == 1, " ".join(words[-30:])
            assert _parallel(task, hw, words) >= WAYS_PER_CORE * hw.cores
            assert "restream" not in _modes(task, hw, words)  # the TIR reading of the same rule agrees
            without = _walk(task, hw, sk, rng, healthy=RULES - {"reread"})
            split_without += row_split(without, tiling) > 1
            restreamed += "restream" in _modes(task, hw, without)
    assert split_without >= 2 and restreamed >= 1
