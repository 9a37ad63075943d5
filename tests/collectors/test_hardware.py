"""Hardware identity: one key rule for every source, one ISA source, and code is run only where
it can run (written for any key; measured and checked on the detected host only)."""
from __future__ import annotations

import json

import pytest

from collectors.hardware import (
    HARDWARE_KEY_RE, NotRunnableHere, check_runs_here, cpu_hardware, detect_hardware, hardware_from_index,
    isa_of_mcpu, key_of_target, missing_on_host,
)

#: An x86 CPU and an Arm one; at least one of the x86 CPUs lacks a feature of any other.
X86_CPUS = ("znver4", "sapphirerapids", "znver3", "icelake-server")
ARM_TARGET = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-v1", "num-cores": 2}


def _foreign_cpu() -> str:
    """An x86 mcpu this host cannot execute code for (every host lacks some CPU's features)."""
    for mcpu in X86_CPUS:
        if missing_on_host({"kind": "llvm", "mcpu": mcpu}):
            return mcpu
    pytest.skip(f"this host runs code for every one of {X86_CPUS}")


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "znver4", "cascadelake", "x86-64_v3", "neoverse-v1"])
def test_a_machine_has_one_key_whether_detected_or_imported(mcpu):
    """The bug: live detection slugged ``mcpu`` while MetaSchedule imports lower-cased it, so an
    imported database of ``skylake-avx512`` landed under another key than live collection."""
    live = cpu_hardware(mcpu, 4).key
    imported = key_of_target({"kind": "llvm", "mcpu": mcpu, "num-cores": 4})
    assert live == imported and HARDWARE_KEY_RE.match(live)
    assert "-" not in live.split("-", 1)[1].rsplit("-", 1)[0], "hyphens of the mcpu are slugged"


def test_an_imported_metaschedule_database_lands_under_the_live_key(tmp_path):
    """End to end through ``import_ms``: a JSON database whose target is ``skylake-avx512``."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from collectors.ms_database import import_ms
    from collectors.sketches import design_space
    from tests.helpers.workloads import matmul
    from storage import Corpus

    target = {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
    mod = matmul(16, 16, 16)
    (tmp_path / "db").mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    workload = db.commit_workload(mod)
    sch = design_space(mod, target)[0]
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-4], tvm.target.Target(target), args))
    corpus = Corpus.open(tmp_path / "corpus")
    report = import_ms(corpus, tmp_path / "db")
    assert report.hardware_keys == [cpu_hardware("skylake-avx512", 4).key] == ["cpu-skylake_avx512-4c"]


def test_isa_comes_from_llvm_for_live_and_stored_hardware():
    live = detect_hardware("cpu")
    assert live.isa == isa_of_mcpu(live.arch)
    stored = hardware_from_index(live.key, json.loads(json.dumps(live.target)), live.description)
    assert (stored.isa, stored.vector_bits, stored.cores, stored.arch) == (live.isa, live.vector_bits, live.cores,
                                                                             live.arch)
    assert "avx512f" in isa_of_mcpu("znver4") and "avx512f" not in isa_of_mcpu("znver3")


def test_this_host_runs_its_own_code():
    hw = detect_hardware("cpu")
    assert missing_on_host(hw.target) == []
    check_runs_here(hw)
    check_runs_here({"kind": "llvm"})  # generic x86-64 runs on any x86 host


def test_code_for_another_cpu_or_a_missing_gpu_is_refused_naming_both():
    mcpu = _foreign_cpu()
    foreign = cpu_hardware(mcpu, 2)
    with pytest.raises(NotRunnableHere) as err:
        check_runs_here(foreign)
    text = str(err.value)
    assert foreign.key in text and detect_hardware("cpu").arch in text
    with pytest.raises(NotRunnableHere, match="aarch64"):
        check_runs_here(ARM_TARGET)
    from collectors.hardware import cuda_available, cuda_hardware_of

    if not cuda_available():
        with pytest.raises(NotRunnableHere, match="CUDA GPU"):
            check_runs_here(cuda_hardware_of("NVIDIA H200", "9.0", 132))


def test_measuring_or_checking_foreign_code_fails_before_anything_runs(tmp_path):
    """The product refuses at the edge: tuning, the correctness check and the whole-model run."""
    from collectors.compile import run_model
    from collectors.correctness import check_schedule, make_reference
    from collectors.sketches import design_space
    from collectors.tasks import Task
    from collectors.tir import workload_key
    from collectors.tuner import TuneConfig, tune_task
    from tests.helpers.workloads import matmul

    foreign = cpu_hardware(_foreign_cpu(), 2)
    mod = matmul(16, 16, 16)
    task = Task(workload_key(mod), "mm16", mod)
    calls = []
    with pytest.raises(NotRunnableHere):
        tune_task(task, foreign, TuneConfig(trials=1), on_records=calls.append)
    assert calls == []
    sch = design_space(mod, foreign)[0]  # writing a program for the foreign CPU is fine
    with pytest.raises(NotRunnableHere):
        check_schedule(sch, make_reference(mod), foreign)
    with pytest.raises(NotRunnableHere):
        run_model(object(), [], foreign)
