"""Layout-free inputs (TOPI's ``layout_free_placeholders``, a PrimFunc's ``layout_free_buffers``):
a schedule may read such an input in another layout (MetaSchedule's ``RewriteLayout``), and the
built function then takes the input in that layout. Measuring must hand it the reference input
rewritten the same way, and check the answer against the rewritten copies: every such program
failed with ``Mismatched w_global.ndim`` before (issue 22)."""
from __future__ import annotations

import numpy as np
import pytest


def _task(kind: str):
    import tvm
    from tvm import te, topi

    from collectors.tasks import Task
    from collectors.tir import workload_key

    if kind == "dense":
        x, w = te.placeholder((16, 64), name="x"), te.placeholder((32, 64), name="w")
        out = topi.nn.relu(topi.nn.dense(x, w))
    elif kind == "batch_matmul":
        x, w = te.placeholder((2, 16, 32), name="x"), te.placeholder((2, 24, 32), name="w")
        out = topi.nn.batch_matmul(x, w)
    else:
        # 48 output channels: three micro-tiles of 16, so the rewrite is not the identity (with 16 or 32
        # channels a packed weight's tiles walk it in its own order since their kc covers the reduction)
        x, w = te.placeholder((1, 8, 8, 16), name="x"), te.placeholder((3, 3, 16, 48), name="w")
        out = topi.nn.conv2d_nhwc(x, w, 1, 1, 1)
    mod = tvm.IRModule({"main": te.create_prim_func([x, w, out])})
    return Task(workload_key(mod), kind, mod, op_kind=kind)


@pytest.fixture(params=["dense", "batch_matmul", "conv2d_nhwc"])
def rewritten(request, cpu_hw):
    """A task with a layout-free weight and the rules' schedule of it, which rewrites its layout."""
    from collectors.layout import layout_rewrites
    from collectors.rules import rule_schedule

    task = _task(request.param)
    assert "layout_free_buffers" in task.mod["main"].attrs
    sch = rule_schedule(task, cpu_hw).schedule
    rewrites = layout_rewrites(sch.mod)
    assert [r.param for r in rewrites] == [1], f"{request.param}: the rules' schedule does not rewrite the weight"
    return task, sch, rewrites


@pytest.mark.slow
def test_layout_free_schedules_are_measured_and_checked(rewritten, cpu_hw):
    from collectors.tuner import measure_schedules

    task, sch, _ = rewritten
    records = []
    measure_schedules(task, cpu_hw, [sch], tuner="test", on_records=records.extend)
    assert len(records) == 1
    assert records[0].error is None, records[0].error
    assert records[0].latency_s > 0


def test_a_candidate_rewrites_its_weight_once_and_is_checked_against_that_copy(rewritten, cpu_hw, tmp_path,
                                                                              monkeypatch):
    """The weight is rewritten for the run, and the check that it came back unchanged compares it
    with that same copy: rewritten a second time for the check, LLaMA-7B's 131M-element LM head
    weight cost ~2.3 s more a candidate."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    from collectors import layout
    from collectors.builder import build_one
    from collectors.correctness import make_reference
    from collectors.runner import run_one
    from collectors.tir import as_target

    task, sch, rewrites = rewritten
    artifact = build_one(sch.mod, as_target(cpu_hw), str(tmp_path))
    ref = make_reference(task.mod, path=str(tmp_path / "ref.npz"))
    applied = []
    real_apply = layout.LayoutRewrite.apply
    monkeypatch.setattr(layout.LayoutRewrite, "apply", lambda self, a: applied.append(self.param) or real_apply(self, a))
    evaluator = EvaluatorConfig(number=1, repeat=1, min_repeat_ms=0, enable_cpu_cache_flush=False)
    costs, _, _ = run_one(artifact, "cpu", evaluator, ref.path, (), 1e-3, 1e-4)
    assert costs and applied == [1]


def test_a_rewrite_maps_the_input_as_the_scheduled_function_reads_it(rewritten):
    """The rewrite's index map, applied to an input, gives the array the built function (its
    rewrite block removed, as MetaSchedule builds) must be passed: the same answer as the
    unscheduled function on the original input."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from collectors.correctness import param_specs
    from collectors.layout import rewrite_inputs

    task, sch, rewrites = rewritten
    rng = np.random.default_rng(0)
    specs = param_specs(task.mod)
    inputs = [rng.standard_normal(shape).astype(dtype) for dtype, shape in specs]
    expected = [a.copy() for a in inputs]
    tvm.compile(task.mod, target="llvm")(*[tvm.runtime.tensor(a) for a in expected[:-1]],
                                          out := tvm.runtime.tensor(np.zeros_like(inputs[-1])))
    want = out.numpy()
    built = tvm.compile(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod), target="llvm")
    args = [tvm.runtime.tensor(a) for a in rewrite_inputs(rewrites, inputs)]
    assert tuple(args[1].shape) == rewrites[0].shape != specs[1][1]
    built(*args)
    np.testing.assert_allclose(args[-1].numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_rewrite_travels_as_json(rewritten):
    from collectors.layout import LayoutRewrite

    _, _, rewrites = rewritten
    again = [LayoutRewrite.from_json(r.to_json()) for r in rewrites]
    assert [(r.param, r.shape, r.index_map) for r in again] == [(r.param, r.shape, r.index_map) for r in rewrites]
    assert "lambda" in rewrites[0].index_map


def test_a_function_without_layout_free_inputs_has_no_rewrites(cpu_hw):
    import tvm

    from collectors.layout import layout_rewrites
    from collectors.rules import rule_schedule
    from collectors.tasks import Task
    from collectors.tir import workload_key

    plain = tvm.IRModule({"main": _task("dense").mod["main"].without_attr("layout_free_buffers")})
    sch = rule_schedule(Task(workload_key(plain), "dense", plain, op_kind="matmul"), cpu_hw).schedule
    assert layout_rewrites(sch.mod) == []


@pytest.mark.slow
def test_metaschedules_own_search_measures_a_layout_free_task(cpu_hw):
    """The project's search on TOPI's dense: every candidate failed to run before."""
    from collectors.tuner import TuneConfig, tune_task

    records = []
    tune_task(_task("dense"), cpu_hw, TuneConfig(trials=4, strategy="evolutionary", seed=3),
              on_records=records.extend)
    assert records and all(r.error is None for r in records), [r.error for r in records if r.error]


def test_the_vectorised_rewrite_equals_tvms_index_map(rewritten):
    """The numpy scatter gives exactly what TVM's IndexMap.map_tensor gives."""
    import tvm

    from collectors.correctness import param_specs

    task, _, (r,) = rewritten
    dtype, shape = param_specs(task.mod)[r.param]
    original = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    want = tvm.ir.load_json(r.index_map_json).map_tensor(tvm.runtime.tensor(original)).numpy()
    np.testing.assert_array_equal(r.apply(original), want)


@pytest.mark.parametrize("shape, fn, new_shape", [
    ((64, 96), lambda k, j: (j // 32, k // 4, j % 32 // 16, k % 4, j % 16), (3, 16, 2, 4, 16)),
    ((8, 64), lambda k, j: (j // 16 % 2, j // 32, k, j % 16), (2, 2, 8, 16)),
    ((3, 3, 16, 48), lambda a, b, c, d: (d // 16, a, b, c, d % 16), (3, 3, 3, 16, 16)),
    ((64, 40), lambda k, j: (j // 16, k, j % 16), (3, 64, 16)),  # 40 columns padded to 48
])
def test_a_packed_layout_is_rewritten_as_the_index_map_says(shape, fn, new_shape):
    """A packed weight's layout (each new index a piece of one old one) is a reshape and a
    transpose (~0.4 s for LLaMA-7B's 131M-element LM head weight, where the scatter took ~2.3 s a
    candidate); one that pads is scattered. Either way, element for element what the map says."""
    import tvm
    from tvm import tirx

    from collectors.layout import LayoutRewrite

    im = tirx.IndexMap.from_func(fn)
    original = np.random.default_rng(2).standard_normal(shape).astype("float32")
    got = LayoutRewrite(1, new_shape, str(im), tvm.ir.save_json(im)).apply(original)
    want = np.zeros(new_shape, "float32")
    for idx in np.ndindex(*shape):
        want[tuple(int(x) for x in im.map_indices([tvm.tirx.const(i, "int32") for i in idx]))] = original[idx]
    np.testing.assert_array_equal(got, want)


def test_a_million_element_layout_free_weight_is_rewritten_and_checked(cpu_hw):
    """TOPI's relu(dense(x, w)) with a 2048x512 weight: the rules' schedule rewrites w, and the
    measured candidate is checked against the unscheduled program (the rewrite once took over 12
    minutes; its speed is bench/compile_curve's, here only that it is right)."""
    import tvm
    from tvm import te, topi

    from collectors.layout import layout_rewrites
    from collectors.rules import rule_schedule
    from collectors.tasks import Task
    from collectors.tir import workload_key

    x, w = te.placeholder((8, 512), name="x"), te.placeholder((2048, 512), name="w")
    mod = tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.relu(topi.nn.dense(x, w))])})
    task = Task(workload_key(mod), "dense", mod, op_kind="matmul")
    sch = rule_schedule(task, cpu_hw).schedule
    (r,) = layout_rewrites(sch.mod)
    weight = np.random.default_rng(0).standard_normal((2048, 512)).astype("float32")
    moved = r.apply(weight)
    index_map = tvm.ir.load_json(r.index_map_json)
    for i, j in ((0, 0), (2047, 511), (1000, 77), (5, 300)):
        new = [int(v) for v in index_map.map_indices([tvm.tirx.IntImm("int32", i), tvm.tirx.IntImm("int32", j)])]
        assert moved[tuple(new)] == weight[i, j]
