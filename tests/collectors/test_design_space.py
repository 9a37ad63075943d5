"""Design space, sketch ids, the CPU import fix and hardware identity."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collectors.sketches import design_space, skeleton, sketch_id
from collectors.tir import trace_json
from collectors.hardware import HARDWARE_KEY_RE, cpu_hardware, cuda_hardware_of, detect_hardware, slug

from tests.helpers.workloads import matmul as te_matmul


@pytest.mark.slow
def test_fast_import_registers_x86_only_in_a_fresh_process():
    code = (
        "import sys; import collectors.fast_import as f; ok=f.install();"
        "import tvm.s_tir.tensor_intrin as ti; from tvm.s_tir import TensorIntrin;"
        "TensorIntrin.get('dot_16x4_avx512');"
        "heavy=[m for m in ('cuda','arm_cpu','hexagon','rocm') if 'tvm.s_tir.tensor_intrin.'+m in sys.modules];"
        "print(ok, f.is_installed(), f.install(), len(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "True", "0"]  # x86 intrinsics registered, no other backend's


def test_shallow_stacks_keep_every_frame_and_the_source_lines_tvmscript_reads():
    """Under ``shallow_stacks`` (the CUDA intrinsics' import), ``inspect.stack()`` lists the same
    frames, with source lines for the innermost three only; a ``@T.prim_func`` parses the same;
    the real ``inspect.stack`` is back afterwards."""
    import inspect

    import tvm
    from tvm.script import tirx as T

    from collectors.fast_import import shallow_stacks

    def make():
        dtype = "float32"  # read from this frame's locals, through the stack the parser took

        @T.prim_func(s_tir=True)
        def add_one(a: T.Buffer((8,), dtype), b: T.Buffer((8,), dtype)):
            for i in range(8):
                with T.sblock("b"):
                    vi = T.axis.spatial(8, i)
                    b[vi] = a[vi] + T.float32(1)
        return add_one

    def both():
        return inspect.stack(), make()

    real_stack, real_func = both()
    with shallow_stacks():
        light_stack, light_func = both()
    assert inspect.stack.__module__ == "inspect"
    assert [f.function for f in light_stack] == [f.function for f in real_stack]  # the same frames
    assert [f.lineno for f in light_stack[2:]] == [f.lineno for f in real_stack[2:]]  # (both() is called twice)
    assert all(f.code_context for f in light_stack[:3]) and all(f.code_context is None for f in light_stack[3:])
    tvm.ir.assert_structural_equal(light_func, real_func)


def test_matmul_design_space_has_three_distinct_sketches(matmul_mod, cpu_hw):
    sketches = design_space(matmul_mod, cpu_hw)
    assert len(sketches) == 3
    kinds = {inst.kind.name for sk in sketches for inst in sk.trace.insts}
    assert {"SamplePerfectTile", "SampleCategorical"} <= kinds
    assert len({skeleton(sk) for sk in sketches}) == 3
    for i, sk in enumerate(sketches):
        assert sketch_id(sk.trace, sketches) == i
        assert sketch_id(json.dumps(trace_json(sk.trace)), sketches) == i  # JSON form too


def test_sketch_id_ignores_decisions_and_rejects_other_programs(matmul_mod, cpu_hw):
    a = design_space(matmul_mod, cpu_hw, seed=1)
    b = design_space(matmul_mod, cpu_hw, seed=2)
    assert [sketch_id(sk, a) for sk in b] == [0, 1, 2]
    other = design_space(te_matmul(32, 48, 16), cpu_hw)
    # Same structure on other extents still matches (extents live in decisions / the program).
    assert sketch_id(other[0], a) in (0, 1, 2)
    from tests.helpers.workloads import relu as te_relu

    relu = design_space(te_relu(), cpu_hw)
    assert sketch_id(relu[0], a) == -1


def test_detect_hardware_cpu_key_is_derived_and_stable():
    hw = detect_hardware("cpu")
    assert HARDWARE_KEY_RE.match(hw.key)
    assert hw.key == f"cpu-{slug(hw.arch)}-{hw.cores}c"
    assert hw.target == {"kind": "llvm", "mcpu": hw.arch, "num-cores": hw.cores}
    assert detect_hardware("cpu").key == hw.key
    assert cpu_hardware("znver4", 2).key == "cpu-znver4-2c"
    assert hw.vector_bits in (128, 256, 512)


def test_detect_hardware_override_and_bad_input():
    assert detect_hardware(key="cpu-mybox-8c").key == "cpu-mybox-8c"
    with pytest.raises(ValueError, match="Bad Key"):
        detect_hardware(key="Bad Key")
    with pytest.raises(ValueError, match="'tpu'"):
        detect_hardware("tpu")
    assert slug("NVIDIA H200") == "h200"


def test_cuda_hardware_identity_from_device_facts():
    h200 = cuda_hardware_of("NVIDIA H200", "9.0", 132)
    assert h200.key == "cuda-sm_90-h200" and h200.kind == "cuda" and h200.cores == 132
    assert h200.target["kind"] == "cuda" and h200.target["arch"] == "sm_90"
    assert cuda_hardware_of("NVIDIA H200", "9.0", 132).key == h200.key  # same GPU, same key
    assert cuda_hardware_of("NVIDIA GeForce RTX 4090", "8.9", 128).key == "cuda-sm_89-geforce_rtx_4090"
    with pytest.raises(ValueError, match="'nine'"):
        cuda_hardware_of("X", "nine", 1)


def test_a_sketch_that_leaves_output_unwritten_is_refused_and_the_rules_pick_another(cpu_hw):
    """A convolution whose consumer pads its output one wider (what folding MobileNetV2's batch
    norms fuses): the sketches that compute the pad at the convolution's tile (TVM's
    reverse_compute_at) replay and pass every postprocessor yet write 112 of 113 rows and columns.
    They are refused (``UnwrittenOutput``), so the rules' program is one that measures correct."""
    import torch
    from tvm.s_tir.schedule import Schedule

    from collectors.rules import rule_schedule
    from collectors.sketches import refusing_postproc, unwritten_output
    from collectors.tasks import extract_tasks, import_relax
    from collectors.tuner import measure_schedules

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 1), torch.nn.ReLU6(), torch.nn.ZeroPad2d((0, 1, 0, 1))).eval()
    args = (torch.randn(1, 4, 16, 16),)
    mod = import_relax(module, args)
    task = next(t for t in extract_tasks((module, args), cpu_hw, model_name="m", relax_mod=mod) if t.op_kind == "conv2d")
    verdicts = []
    for sketch in design_space(task.mod, cpu_hw):
        sch = Schedule(task.mod)
        sketch.trace.apply_to_schedule(sch, remove_postproc=True)
        verdicts.append((unwritten_output(sch.mod), refusing_postproc(sch, task, cpu_hw)))
    assert any(why and "4096 times for the 4624 elements" in why and refused == "UnwrittenOutput" for why, refused in verdicts), verdicts
    assert any(refused is None for _, refused in verdicts)  # a sketch that computes the pad on its own
    records = []
    measure_schedules(task, cpu_hw, [rule_schedule(task, cpu_hw).schedule], tuner="test", on_records=records.extend)
    assert records[0].latency_s is not None and records[0].error is None
