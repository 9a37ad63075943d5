"""Tuning one task: every measured candidate becomes a record; wrong answers are errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

import collectors.tuner as tuner_mod
from collectors.correctness import Reference, check_schedule, compare, make_reference
from collectors.sketches import design_space
from collectors.tasks import Task
from storage import Record
from collectors.tuner import TuneConfig, tune_task



@pytest.fixture(scope="module")
def tuned(matmul_mod, cpu_hw):
    batches: list[list[Record]] = []
    progress: list[tuple] = []
    task = Task("ab" * 8, "matmul64", matmul_mod)
    summary = tune_task(task, cpu_hw, TuneConfig(trials=8, strategy="evolutionary", seed=3),
                        on_records=batches.append, progress=lambda *a: progress.append(a), run_id="r1")
    return summary, batches, progress


@pytest.mark.slow
def test_eight_trials_give_eight_measured_records(tuned, cpu_hw):
    summary, batches, progress = tuned
    records = [r for b in batches for r in b]
    assert len(records) == 8 == summary.records
    assert progress and progress[-1][:2] == (8, 8)
    for rec in records:
        assert isinstance(rec, Record) and rec.record_id and rec.args_info_json and rec.tvm_version
        assert rec.hardware_key == cpu_hw.key and rec.tuner == "evolutionary" and rec.run_id == "r1"
        assert json.loads(rec.tuner_params)["trials"] == 8
        assert rec.sketch_id in (0, 1, 2)
        if rec.error is None:
            assert rec.latency_s > 0 and rec.run_secs
    ok = [r.latency_s for r in records if r.error is None]
    assert ok and summary.best_latency_s == min(ok)


@pytest.mark.slow
def test_record_traces_reapply_to_the_same_correct_program(tuned, matmul_mod, cpu_hw):
    import tvm_ffi
    from tvm.s_tir.schedule import Schedule, Trace

    from collectors.tir import trace_json

    _, batches, _ = tuned
    ref = make_reference(matmul_mod, seed=1)
    recs = [r for b in batches for r in b][:4]
    assert len(recs) == 4
    for rec in recs:
        trace = json.loads(rec.trace_json)
        first, second = Schedule(matmul_mod), Schedule(matmul_mod)
        Trace.apply_json_to_schedule(trace, first)
        Trace.apply_json_to_schedule(trace, second)
        assert tvm_ffi.structural_equal(first.mod, second.mod)
        assert not tvm_ffi.structural_equal(first.mod, matmul_mod)  # it was scheduled
        replayed = {int(k): v for k, v in trace_json(first.trace)[1]}
        assert replayed == {int(k): v for k, v in json.loads(rec.decisions_json)}
        assert check_schedule(first, ref, cpu_hw) is None


def test_wrong_program_is_caught_in_process(matmul_mod, cpu_hw):
    from tests.helpers.workloads import matmul

    ref = make_reference(matmul_mod, seed=0)
    assert check_schedule(matmul_mod, ref, cpu_hw) is None
    sch = design_space(matmul(64, 64, 64), cpu_hw)[0]
    assert check_schedule(sch, ref, cpu_hw) is None  # a sketch is a correct program
    # A "schedule" that drops part of the reduction: same signature, wrong numbers.
    from tvm import te
    import tvm

    a = te.placeholder((64, 64), name="A")
    b = te.placeholder((64, 64), name="B")
    r = te.reduce_axis((0, 63), name="k")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    wrong = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    err = check_schedule(wrong, ref, cpu_hw)
    assert err is not None and err.startswith("wrong answer: max rel err")


def test_compare_tolerates_rounding_but_not_errors():
    e = [np.linspace(-1, 1, 100, dtype=np.float32)]
    assert compare([e[0] * (1 + 1e-6)], e) is None
    bad = e[0].copy()
    bad[7] += 0.5
    assert "max rel err" in compare([bad], e)
    assert compare([np.array([1, 2])], [np.array([1, 3])]).startswith("wrong answer")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compare_decides_as_the_exact_float64_check_does(dtype):
    """The fast path (buffer precision, no float64 copies) never passes what the exact check
    fails: random drifts around the tolerance, NaN, inf, and a wrong element among many."""
    rng = np.random.default_rng(0)
    e = rng.uniform(-1, 1, size=5000).astype(dtype)
    cases = [e.copy(), e * (1 + 1e-6), e + 1e-3 * np.abs(e), e * (1 + 2e-3)]
    for rel in (5e-4, 9.9e-4, 1.01e-3, 3e-3):
        g = e.copy()
        g[rng.integers(0, e.size, 20)] *= 1 + rel
        cases.append(g)
    nan, inf, far = e.copy(), e.copy(), e.copy()
    nan[3], inf[4], far[4999] = np.nan, np.inf, 7.0
    cases += [nan, inf, far]
    exact = lambda g: _exact_compare(g, e)  # noqa: E731
    for g in cases:
        assert (compare([g], [e]) is None) == (exact(g) is None)
    e_nan = e.copy()
    e_nan[0] = np.nan
    assert compare([e_nan.copy()], [e_nan]) is None  # NaN where the reference has NaN is right
    assert compare([e], [e_nan]) is not None


def _exact_compare(g, e, rtol=1e-3, atol_scale=1e-4):
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    scale = float(np.abs(e64).max())
    diff = np.abs(g64 - e64)
    return None if (diff <= rtol * np.abs(e64) + atol_scale * scale).all() else "wrong"


def test_reference_runs_the_same_arithmetic_as_the_serial_program(matmul_mod):
    """The reference splits outer loops across threads; every element comes out bit-identical to
    the plain, serial build of the unscheduled program."""
    import tvm

    ref = make_reference(matmul_mod, seed=2)
    args = [tvm.runtime.tensor(a) for a in ref.inputs]
    tvm.compile(matmul_mod, target=tvm.target.Target({"kind": "llvm"}))["main"](*args)
    np.testing.assert_array_equal(args[-1].numpy(), ref.outputs[-1])


@pytest.mark.slow
def test_wrong_answers_during_tuning_are_errors_not_latencies(cpu_hw, monkeypatch, tmp_path):
    """Tune against a corrupted reference: the runner's check must reject every candidate."""
    from tests.helpers.workloads import matmul

    real = make_reference

    def corrupted(mod, *, seed=0, path=None):
        ref = real(mod, seed=seed)
        ref.outputs[-1] = ref.outputs[-1] + 1.0  # what a wrong schedule would look like
        if path is not None:
            ref.save(path)
        return ref

    monkeypatch.setattr(tuner_mod, "make_reference", corrupted)
    records: list[Record] = []
    summary = tune_task(Task("cd" * 8, "matmul32", matmul(32, 32, 32)), cpu_hw,
                        TuneConfig(trials=3, strategy="replay-trace", seed=1), on_records=records.extend)
    assert len(records) == 3
    for rec in records:
        assert rec.error.startswith("wrong answer: max rel err"), rec.error
        assert rec.latency_s is None and rec.run_secs == []
    assert summary.wrong_answers == 3 and summary.best_latency_s is None


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="'random'"):
        TuneConfig(strategy="random")
    with pytest.raises(ValueError, match="0"):
        TuneConfig(trials=0)


def test_reference_keeps_read_only_buffers_once(matmul_mod, tmp_path):
    ref = make_reference(matmul_mod, seed=5, path=str(tmp_path / "ref.npz"))
    assert ref.outputs[0] is ref.inputs[0] and ref.outputs[1] is ref.inputs[1]  # A, B only read
    np.testing.assert_allclose(ref.outputs[2], ref.inputs[0] @ ref.inputs[1], rtol=1e-4, atol=1e-4)
    back = Reference.load(ref.path)
    assert len(back.inputs) == 3
    for a, b in zip(back.outputs, ref.outputs):
        np.testing.assert_array_equal(a, b)
    assert compare(back.outputs, ref.outputs) is None


def test_a_space_without_decisions_is_measured_as_it_is(cpu_hw):
    """An elementwise task's sketches sample nothing: each is built, run, checked and recorded
    once, through the same builder, runner and records as a search."""
    from collectors.sketches import design_space
    from tests.helpers.workloads import relu

    mod = relu(4096)
    sketches = design_space(mod, cpu_hw)
    assert not any(len(sk.trace.decisions) for sk in sketches), "the premise: nothing to decide"
    records: list[Record] = []
    summary = tune_task(Task("12" * 8, "relu4096", mod), cpu_hw, TuneConfig(trials=64), on_records=records.extend)
    assert summary.records == len(records) == len(sketches)
    for rec in records:
        assert rec.error is None and rec.latency_s > 0 and rec.sketch_id in range(len(sketches))
        assert "EnterPostproc" in rec.trace_json  # postprocessed, as a search's candidates are
