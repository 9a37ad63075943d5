"""Helpers of the tensor-language tests: small TE workloads, sampled traces, round-trip checks.

Imported by the test modules (``from tests.tlm.helpers import ...``); fixtures stay in conftest.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from tlm.language import decode, encode

#: Records measured on a 2-core Zen 4 for the small matmul and softmax tasks (encode/lower only).
MEASURED_RECORDS = Path(__file__).parent / "data" / "measured_records.json"


def measured_corpus(root, tasks, hw, models=(("matmul", "model_a"), ("softmax", "model_b"))):
    """A corpus at ``root`` holding :data:`MEASURED_RECORDS` on ``hw``; each task of ``models``
    (task name, model) is registered as a workload of that model. The caller closes it."""
    from storage import Corpus

    c = Corpus.open(root)
    c.register_hardware(hw.key, target=hw.target, description="test CPU")
    for name, model in models:
        t = tasks[name]
        c.register_workload(t.workload_key, task_name=t.task_name, tvmscript=t.tvmscript, op_kind=t.op_kind)
        c.register_workload_model(t.workload_key, model=model, weight=1)
    cols = ("workload_key", "hardware_key", "task_name", "sketch_id", "trace_json", "decisions_json",
            "latency_s", "error", "tuner", "tuner_params", "tvm_version")
    recs = json.loads(MEASURED_RECORDS.read_text())
    c.append([{k: r[k] for k in cols} | {"run_secs": [r["latency_s"]]} for r in recs])
    return c


def make_task(mod, name: str, op_kind: str):
    from collectors.tasks import Task
    from collectors.tir import workload_key

    return Task(workload_key=workload_key(mod), task_name=name, mod=mod, op_kind=op_kind)


def matmul_tvmscript(m: int = 64, n: int = 64, k: int = 64, name: str = "mm") -> str:
    """A user's matmul PrimFunc as TVMScript text, as a client of the schedule server sends it."""
    return f'''from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def {name}(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"), C: T.Buffer(({m}, {n}), "float32")):
    T.func_attr({{"tirx.noalias": True}})
    for i, j, r in T.grid({m}, {n}, {k}):
        with T.sblock("C"):
            vi, vj, vr = T.axis.remap("SSR", [i, j, r])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vr] * B[vr, vj]
'''


def matmul_relu_mod(m: int = 64, n: int = 96, k: int = 128):
    import tvm
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: te.max(c[i, j], tvm.tirx.const(0, "float32")), name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, d])})


def softmax_mod(m: int = 8, n: int = 100):
    import tvm
    from tvm import te

    a = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    mx = te.compute((m,), lambda i: te.max(a[i, k], axis=k), name="row_max")
    e = te.compute((m, n), lambda i, j: te.exp(a[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, n), name="k2")
    s = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    o = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="softmax")
    return tvm.IRModule({"main": te.create_prim_func([a, o])})


def reshape_split_mod():
    """A reshape read by three splits: on CUDA, AutoInline reverse-inlines the reshape into one
    split and leaves the others reading a buffer nobody allocates (a sketch with no valid program)."""
    import tvm
    from tvm import te

    a = te.placeholder((8, 96), name="A")
    r = te.compute((1, 8, 96), lambda z, i, j: a[i, j], name="T_reshape")

    def part(k: int):
        return te.compute((1, 8, 32), lambda z, i, j: r[z, i, j + 32 * k], name=f"T_split{k}")

    return tvm.IRModule({"main": te.create_prim_func([a, part(0), part(1), part(2)])})


def conv_mod(c: int = 8, hw: int = 14, f: int = 16):
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, c, hw, hw), name="X")
    w = te.placeholder((f, c, 3, 3), name="W")
    y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def lowered_shared_bytes(mod, target) -> int:
    """Bytes of shared memory the lowered program allocates: the passes ``VerifyGPUCode``
    runs (TVM 0.27, src/s_tir/meta_schedule/postproc/verify_gpu_code.cc), then every
    shared allocation summed. Raises when lowering fails."""
    import tvm
    from tvm import s_tir, tirx

    from tlm.shared_memory import statements

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


def sample_traces(task, hw, per_sketch: int = 2, seed: int = 0):
    """Traces of every sketch with random decisions (TVM samples them: valid by construction)."""
    from tvm.s_tir.schedule import Schedule, Trace

    from tlm.space import build_space

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
    import tvm_ffi

    sentence = encode(task, hw, trace)
    back = decode(sentence, task, hw)
    assert sampling_decisions(back) == sampling_decisions(trace)
    a, b = applied(task.mod, trace), applied(task.mod, back)
    assert tvm_ffi.structural_equal(a.mod, b.mod)
    assert sampling_decisions(b.trace) == sampling_decisions(back)  # nothing repaired on replay
    assert encode(task, hw, back) == sentence
    return sentence


def record_round_trip(task, hw, trace_json: str):
    """decode(encode(record)) gives the record's decisions and the same scheduled program."""
    import tvm_ffi
    from tvm.s_tir.schedule import Schedule, Trace

    s = encode(task, hw, trace_json)
    back = decode(s, task, hw)
    sch = Schedule(task.mod)
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    original = sch.trace
    assert sampling_decisions(back) == sampling_decisions(original)
    assert tvm_ffi.structural_equal(applied(task.mod, original).mod, applied(task.mod, back).mod)
    return s


def small_tasks() -> dict:
    """The matmul and softmax Tasks of :data:`MEASURED_RECORDS` (the conftest's ``tasks`` subset)."""
    return {"matmul": make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul"),
            "softmax": make_task(softmax_mod(), "fused_softmax", "reduction")}


def znver4() -> object:
    """The fixed 2-core Zen 4 of :data:`MEASURED_RECORDS` (encode, decode, lower only)."""
    from collectors.hardware import hardware_from_index

    return hardware_from_index("cpu-znver4-2c", {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, "test CPU")


def sentence_sets(tmp_root, *, per_sketch: int = 4, top_k: int = 4):
    """``(dataset_dir, corpus_root)``: sentence sets built from :func:`measured_corpus` (model_b,
    the softmax, held out), as `tlm dataset build` writes them."""
    from tlm.dataset import DatasetConfig, build_datasets

    root, out = Path(tmp_root) / "corpus", Path(tmp_root) / "sets"
    c = measured_corpus(root, small_tasks(), znver4())
    try:
        build_datasets(c, str(out), DatasetConfig(pretrain_per_sketch=per_sketch, finetune_top_k=top_k,
                                                  held_out_models=("model_b",)), progress=False)
    finally:
        c.close()
    return out, root
