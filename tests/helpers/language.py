"""Sampled traces and the round-trip checks of the tensor language (encode <-> decode)."""
from __future__ import annotations

import json
import math

from tlm.language import decode, encode


def sample_traces(task, hw, per_sketch: int = 2, seed: int = 0):
    """Traces of every sketch with random decisions (TVM samples them: valid by construction)."""
    from tvm.s_tir.schedule import Schedule, Trace

    from tlm.language.space import build_space

    out = []
    for sk in build_space(task, hw).sketches:
        for j in range(per_sketch):
            sch = Schedule(task.mod, seed=seed * 1000 + sk.sketch_id * 10 + j + 1)
            Trace(sk.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            out.append(sch.trace)
    return out


def sampling_decisions(trace):
    """Decisions of the sampling instructions in trace order (before postprocessing)."""
    out = []
    for inst in trace.insts:
        if inst.kind.name == "EnterPostproc":
            break
        if inst.kind.name.startswith("Sample"):
            d = trace.decisions[inst]
            out.append([int(x) for x in d] if hasattr(d, "__len__") else int(d))
    return out


def applied(mod, trace):
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=True)
    return sch


def assert_round_trip(task, hw, trace):
    """The exact round trip in every language version (the version-1 sentence is returned); the
    versions differ in their prompts alone."""
    import tvm_ffi
    from tlm.language import LANGUAGE_VERSIONS

    sentences = []
    for language in LANGUAGE_VERSIONS:
        sentence = encode(task, hw, trace, language=language)
        back = decode(sentence, task, hw)
        assert sampling_decisions(back) == sampling_decisions(trace)
        a, b = applied(task.mod, trace), applied(task.mod, back)
        assert tvm_ffi.structural_equal(a.mod, b.mod)
        assert sampling_decisions(b.trace) == sampling_decisions(back)  # nothing repaired on replay
        assert encode(task, hw, back, language=language) == sentence
        sentences.append(sentence)
    assert len({s.decisions for s in sentences}) == 1 and len({s.sketch_id for s in sentences}) == 1
    return sentences[0]


def record_round_trip(task, hw, trace_json: str):
    """decode(encode(record)) gives the record's decisions and the same scheduled program."""
    import tvm_ffi
    from tvm.s_tir.schedule import Schedule, Trace

    from tlm.language import LANGUAGE_VERSIONS

    sch = Schedule(task.mod)
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    original = sch.trace
    sentences = []
    for language in LANGUAGE_VERSIONS:  # every version reads the record back the same
        s = encode(task, hw, trace_json, language=language)
        back = decode(s, task, hw)
        assert sampling_decisions(back) == sampling_decisions(original)
        assert tvm_ffi.structural_equal(applied(task.mod, original).mod, applied(task.mod, back).mod)
        sentences.append(s)
    return sentences[0]


def lowered_shared_bytes(mod, target) -> int:
    """Bytes of shared memory the lowered program allocates: the passes ``VerifyGPUCode``
    runs (TVM 0.27, src/s_tir/meta_schedule/postproc/verify_gpu_code.cc), then every
    shared allocation summed. Raises when lowering fails."""
    import tvm
    from tvm import s_tir, tirx

    from tlm.language.shared_memory import statements

    S, T = s_tir.transform, tirx.transform
    passes = [S.LowerCrossThreadReduction(), S.LowerInitBlock(), S.PlanAndUpdateBufferAllocationLocation(),
              S.ConvertBlocksToOpaque(), S.LiftThreadBinding(), S.ManifestSharedMemoryLocalStage(),
              S.CompactBufferAllocation(), T.StmtSimplify(), S.LowerAutoCopy(), S.UnifyThreadBinding(),
              S.LowerMatchBuffer(), S.InjectSoftwarePipeline(), S.LowerOpaqueBlock(), T.FlattenBuffer(),
              T.BF16ComputeLegalize(), T.NarrowDataType(32), T.StmtSimplify(), T.VectorizeLoop(True),
              S.InjectVirtualThread(), S.InjectDoubleBuffer(), T.StorageRewrite(),
              S.MergeSharedMemoryAllocations(), T.LowerIntrin()]
    f = mod["main"].with_attr("global_symbol", "main").with_attr("target", target)
    lowered = tvm.transform.Sequential(passes)(tvm.IRModule({"main": f.with_attr("tirx.noalias", True)}))
    return sum(math.prod(int(e) for e in s.buffer.shape) * tvm.DataType(s.buffer.dtype).bits // 8
               for s in statements(lowered["main"].body)
               if type(s).__name__.startswith("Alloc") and s.buffer.scope().startswith("shared"))


def random_walk(data, task, hw, sketch_id=None):
    """A random legal sentence of ``task`` (of sketch ``sketch_id``, else a drawn one)."""
    from hypothesis import strategies as st

    from tlm.language import EOS, legal_next_tokens, prompt_tokens
    from tlm.language.space import build_space

    space = build_space(task, hw)
    if sketch_id is None:
        sketch_id = data.draw(st.integers(0, len(space.sketches) - 1))
    words = prompt_tokens(space, space.sketches[sketch_id])
    while words[-1] != EOS:
        legal = legal_next_tokens(words, task, hw)
        assert legal, f"dead end after {words[-6:]}"
        words.append(data.draw(st.sampled_from(sorted(legal))))
        assert len(words) < 2000
    return words
