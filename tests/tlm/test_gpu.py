"""CUDA sketches (built without a GPU): thread, pipeline and shared-memory limits on tile factors,
thread binding, round trips. Every test that needs the CUDA tensor intrinsics lives here, so a
run pays their import (~15-25 s on 2 cores; 40-150 s before ``collectors.fast_import.shallow_stacks``)
once, on one xdist worker (whole files each)."""
from __future__ import annotations

import math
import random

import pytest
from tvm.s_tir.schedule import Schedule

from tlm.language import apply_sentence
from tlm.language import EOS, LanguageError, legal_next_tokens, live_sketches, prompt_tokens, read_decisions
from tlm.language.space import build_space

pytestmark = pytest.mark.slow  # the CUDA tensor intrinsics import costs ~15-60 s once a process


def test_thread_groups_follow_bind_fuse_split(tasks, cuda_hw):
    sk = build_space(tasks["matmul"], cuda_hw).sketches[0]
    tiles = [c.inst_index for c in sk.choices if c.kind == "tile"]
    by_axis = {g.axis: g for g in sk.thread_groups}
    assert set(by_axis) == {"threadIdx.x", "vthread.x"}
    assert by_axis["threadIdx.x"].members == ((tiles[0], 2), (tiles[1], 2))
    assert (by_axis["threadIdx.x"].low, by_axis["threadIdx.x"].high) == (32, 1024)
    assert by_axis["vthread.x"].members == ((tiles[0], 1), (tiles[1], 1))
    assert by_axis["vthread.x"].high == 8


def _walk(space, sk, task, hw, rng) -> list[str]:
    words = prompt_tokens(space, sk)
    while words[-1] != EOS:
        legal = legal_next_tokens(words, task, hw)
        assert legal, f"dead end after {words[-6:]}"
        words.append(rng.choice(sorted(legal)))
    return words


@pytest.mark.parametrize("name", ["matmul", "conv2d", "softmax", "matmul_big", "conv2d_big"])
def test_legal_walks_are_valid_gpu_programs(tasks, cuda_hw, name):
    """Every constrained CUDA walk keeps its thread/pipeline groups in range, allocates the
    shared memory the model predicts (compared with the lowered program) within the target's
    limit, and passes every postprocessor, VerifyGPUCode included, without repair."""
    from tests.helpers.language import lowered_shared_bytes

    task = tasks[name]
    space = build_space(task, cuda_hw)
    rng = random.Random(5)
    assert live_sketches(space) == space.sketches  # every sketch of these workloads can be valid
    for sk in space.sketches:
        for _ in range(4):
            words = _walk(space, sk, task, cuda_hw, rng)
            state = read_decisions(words, task, cuda_hw)
            factors = {c.inst_index: v for c, v in state.values if c.kind == "tile"}
            for g in sk.thread_groups:
                extent = math.prod(factors[t][p] for t, p in g.members)
                assert g.low <= extent <= g.high, (g.axis, extent)
            program = apply_sentence(words, task, cuda_hw)  # raises InvalidProgram if rejected
            if sk.shared_memory is not None:
                model = sk.shared_memory.footprint(factors)
                assert model <= sk.shared_memory.limit
                sch = Schedule(task.mod)
                program.trace.apply_to_schedule(sch, remove_postproc=True)
                assert model == lowered_shared_bytes(sch.mod, space.target), (sk.sketch_id, factors)


def test_big_tasks_have_shared_memory_and_pipelines(tasks, cuda_hw):
    """The big workloads exercise every limit: shared cache reads are modelled and some sketch
    pipelines its copies (unconstrained, a third of random programs break a limit)."""
    from tlm.language.gpu import PIPELINE_AXIS

    for name in ("matmul_big", "conv2d_big"):
        sketches = build_space(tasks[name], cuda_hw).sketches
        assert any("CacheRead" in sk.kinds for sk in sketches), name
        assert all(sk.shared_memory is not None for sk in sketches if "CacheRead" in sk.kinds)
        assert any(g.axis == PIPELINE_AXIS for sk in sketches for g in sk.thread_groups)


def test_a_sketch_without_valid_programs_is_never_offered(cuda_hw):
    """A sketch that fails whatever its decisions is dead: not offered in the prompt, and a
    prompt that names it gets one clear error instead of a walk to an invalid program."""
    from tests.helpers.workloads import make_task, reshape_split_mod
    from collectors.sketches import refusing_postproc

    task = make_task(reshape_split_mod(), "fused_reshape_split", "layout")
    space = build_space(task, cuda_hw)
    assert live_sketches(space) == []
    assert "VerifyGPUCode" in space.sketches[0].dead
    sch = Schedule(task.mod)  # the sketch's own decisions are refused too: it is not our doing
    space.sketches[0].trace.apply_to_schedule(sch, remove_postproc=True)
    assert refusing_postproc(sch, task, cuda_hw) == "VerifyGPUCode"
    with pytest.raises(LanguageError, match="no sketch of fused_reshape_split"):
        legal_next_tokens(["[BOS]"], task, cuda_hw)


def _fp16_matmul_task(n: int = 256):
    import tvm
    from tvm import te

    from tests.helpers.workloads import make_task

    a = te.placeholder((n, n), name="A", dtype="float16")
    b = te.placeholder((n, n), name="B", dtype="float16")
    r = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return make_task(tvm.IRModule({"main": te.create_prim_func([a, b, c])}), "matmul_f16", "matmul")


def test_tensor_core_walks_are_valid_gpu_programs(cuda_hw):
    """fp16 matmul on sm_90 gives tensor-core sketches: a warp runs along threadIdx.x (so the
    tiled threadIdx.y is bounded by the limits / 32), the copies go through shared.dyn (whose
    merged allocation the model emulates) and a transposed copy may vectorise at most 4
    lanes. Every constrained walk passes every postprocessor; the model is the lowered size."""
    from tests.helpers.language import lowered_shared_bytes

    task = _fp16_matmul_task()
    space = build_space(task, cuda_hw)
    assert live_sketches(space) == space.sketches
    assert all("warp_execution" in str(sk.trace) for sk in space.sketches)
    rng = random.Random(11)
    for sk in space.sketches:
        assert [(g.axis, g.low, g.high) for g in sk.thread_groups] == [("threadIdx.y", 1, 32)]
        assert sorted(sk.vector_lanes.values()) in ([4, 8, 8], [8, 8, 8])
        for _ in range(3):
            words = _walk(space, sk, task, cuda_hw, rng)
            program = apply_sentence(words, task, cuda_hw)
            factors = {cc.inst_index: v for cc, v in read_decisions(words, task, cuda_hw).values if cc.kind == "tile"}
            sch = Schedule(task.mod)
            program.trace.apply_to_schedule(sch, remove_postproc=True)
            assert lowered_shared_bytes(sch.mod, space.target) == sk.shared_memory.footprint(factors) \
                <= sk.shared_memory.limit


def test_every_valid_tensor_core_sample_is_a_sentence(cuda_hw):
    """Nothing valid is pruned: every program MetaSchedule samples for a tensor-core sketch that
    its postprocessors accept decodes through the legal words (exact round trip)."""
    from tvm.s_tir.schedule import Trace

    from tests.helpers.language import assert_round_trip
    from collectors.sketches import refusing_postproc

    task = _fp16_matmul_task(256)
    kept = 0
    for sk in build_space(task, cuda_hw).sketches:
        for seed in range(15):
            sch = Schedule(task.mod, seed=seed + 1)
            Trace(sk.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            trace = sch.trace
            if refusing_postproc(sch, task, cuda_hw) is None:
                assert_round_trip(task, cuda_hw, trace)
                kept += 1
    assert kept >= 4


def test_cuda_design_space_binds_threads_and_sketch_ids_resolve():
    """Generating CUDA sketches needs no GPU (only the CUDA intrinsics import, ~40 s on a Zen 4)."""
    from collectors.hardware import Hardware
    from collectors.sketches import design_space, sketch_id
    from tests.helpers.workloads import matmul

    h200_like = Hardware(key="cuda-sm_90-h200", kind="cuda", arch="sm_90", cores=132, vector_bits=1024,
                         target={"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                                 "max_shared_memory_per_block": 49152, "thread_warp_size": 32})
    sketches = design_space(matmul(128, 128, 128), h200_like)
    assert len(sketches) >= 1
    for i, sk in enumerate(sketches):
        kinds = [inst.kind.name for inst in sk.trace.insts]
        assert "Bind" in kinds  # thread binding: blockIdx/threadIdx
        tiles = [inst for inst in sk.trace.insts if inst.kind.name == "SamplePerfectTile"]
        assert any(int(inst.attrs[0]) == 5 for inst in tiles)  # SSSRRSRS: 5-level spatial tiles
        assert sketch_id(sk, sketches) == i


def test_cuda_sketches_round_trip(tasks, cuda_hw):
    """A CUDA target builds sketches without a GPU. Like MetaSchedule, keep the sampled programs
    every CUDA postprocessor accepts (those are what become records); they must round-trip."""
    from tests.helpers.language import assert_round_trip, sample_traces
    from tlm.language import InvalidProgram, check_trace

    for name in ("matmul", "softmax", "conv2d"):
        task = tasks[name]
        assert build_space(task, cuda_hw).sketches
        kept = 0
        for tr in sample_traces(task, cuda_hw, per_sketch=6):
            try:
                check_trace(tr, {}, task, cuda_hw)
            except InvalidProgram:
                continue  # MetaSchedule would drop it before building: never a record
            s = assert_round_trip(task, cuda_hw, tr)
            assert "sms" in s.tokens[:8]
            kept += 1
        assert kept >= 2, name
