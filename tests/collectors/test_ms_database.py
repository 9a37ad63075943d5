"""MetaSchedule interop: a real tuned JSON database goes in and comes out equal, and applies."""
from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from collectors.hardware import key_of_target
from collectors.ms_database import export_ms, import_ms, key_from_shash, shash_from_key
from collectors.tir import workload_key
from storage import Corpus, CorpusError
from storage.schema import canonical_json


def _records(work_dir):
    """Original records of a JSON database as comparable tuples: (shash, trace, run_secs)."""
    wl = [json.loads(l)[0] for l in (work_dir / "database_workload.json").read_text().splitlines() if l.strip()]
    out = []
    for line in (work_dir / "database_tuning_record.json").read_text().splitlines():
        if line.strip():
            i, (trace, secs, _target, _args) = json.loads(line)
            out.append((wl[i], canonical_json(json.dumps(trace)), tuple(secs)))
    return sorted(out)


def test_workload_key_is_metaschedules_shash(ms_database):
    work_dir, _, _, tasks = ms_database
    shash = json.loads((work_dir / "database_workload.json").read_text().splitlines()[0])[0]
    assert workload_key(tasks[0]) == key_from_shash(shash)
    assert shash_from_key(key_from_shash(shash)) == shash
    assert len(workload_key(tasks[0])) == 16


def test_import_ms(tmp_path, ms_database):
    work_dir, _, target, tasks = ms_database
    c = Corpus.open(tmp_path / "c")
    rep = import_ms(c, work_dir)
    original = _records(work_dir)
    hw = key_of_target(target)
    assert hw == f"cpu-{target['mcpu']}-2c" and rep.hardware_keys == [hw]
    assert rep.records == rep.stored == len(original) == 8 and rep.errors == 0 and not rep.warnings
    table = c.scan()
    assert table.num_rows == 8
    assert set(table["workload_key"].to_pylist()) == {workload_key(tasks[0])} == set(rep.workloads)
    assert set(table["tuner"].to_pylist()) == {"ms-import"}
    for row in table.to_pylist():
        assert row["latency_s"] == pytest.approx(statistics.median(row["run_secs"]))
        assert json.loads(row["args_info_json"])[0][0] == "TENSOR"
    w = c.workload(workload_key(tasks[0]))
    assert w["mod_json"] and "T.prim_func" in w["tvmscript"]
    assert c.hardware_info(hw)["target"]["mcpu"] == target["mcpu"]
    again = import_ms(c, work_dir)
    assert (again.records, again.stored) == (8, 0)  # idempotent


def test_import_export_all_round_trip(tmp_path, ms_database):
    from tvm.s_tir import meta_schedule as ms

    work_dir, _, target, _ = ms_database
    c = Corpus.open(tmp_path / "c")
    import_ms(c, work_dir)
    hw = key_of_target(target)
    rep = export_ms(c, tmp_path / "out", hardware_key=hw, best_only=False)
    assert (rep.workloads, rep.records, rep.skipped) == (1, 8, [])
    assert _records(tmp_path / "out") == _records(work_dir)
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "out"), allow_missing=False)
    assert len(db.get_all_tuning_records()) == 8
    # and back again: importing the export changes nothing
    c2 = Corpus.open(tmp_path / "c2")
    import_ms(c2, tmp_path / "out")
    cols = ["record_id", "workload_key", "hardware_key", "trace_json", "run_secs", "latency_s"]
    key = lambda r: r["record_id"]  # noqa: E731
    assert sorted(c2.scan(columns=cols).to_pylist(), key=key) == sorted(c.scan(columns=cols).to_pylist(), key=key)
    with pytest.raises(CorpusError, match="refusing to overwrite"):
        export_ms(c, tmp_path / "out", hardware_key=hw)


def test_export_best_applies_with_compile_relax(tmp_path, ms_database):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    work_dir, mod, target, tasks = ms_database
    c = Corpus.open(tmp_path / "c")
    import_ms(c, work_dir)
    hw = key_of_target(target)
    rep = export_ms(c, tmp_path / "best", hardware_key=hw, best_only=True)
    assert (rep.workloads, rep.records) == (1, 1)
    orig = ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    best = ms.database.JSONDatabase(work_dir=str(tmp_path / "best"), allow_missing=False)
    tgt = tvm.target.Target(target)
    want = orig.get_top_k(orig.commit_workload(tasks[0]), 1)[0]
    got = best.get_top_k(best.commit_workload(tasks[0]), 1)[0]
    assert str(got.trace) == str(want.trace)
    assert [float(x) for x in got.run_secs] == [float(x) for x in want.run_secs]
    assert min(c.scan()["latency_s"].to_pylist()) == pytest.approx(float(np.median([float(x) for x in want.run_secs])))
    assert best.query_tuning_record(tasks[0], tgt, "main") is not None  # the lookup compile_relax does

    ex = ms.relax_integration.compile_relax(best, mod, tgt, params=None)
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    a = np.random.default_rng(0).standard_normal((64, 64)).astype("float32")
    b = np.random.default_rng(1).standard_normal((64, 64)).astype("float32")
    out = vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy()
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_import_needs_hardware_key_when_target_names_none(tmp_path, ms_database):
    work_dir, _, _, _ = ms_database
    src = tmp_path / "gpu-db"
    src.mkdir()
    (src / "database_workload.json").write_text((work_dir / "database_workload.json").read_text())
    lines = []
    for line in (work_dir / "database_tuning_record.json").read_text().splitlines():
        i, (trace, secs, _t, args) = json.loads(line)
        lines.append(json.dumps([i, [trace, secs, {"kind": "cuda", "arch": "sm_90"}, args]]))
    lines[0] = json.dumps([0, [json.loads(lines[0])[1][0], [1e10], {"kind": "cuda", "arch": "sm_90"}, json.loads(lines[0])[1][3]]])
    (src / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
    c = Corpus.open(tmp_path / "c")
    with pytest.raises(CorpusError, match="cannot derive a hardware key .* pass hardware_key="):
        import_ms(c, src)
    rep = import_ms(c, src, hardware_key="cuda-sm_90-h200")
    assert rep.errors == 1 and rep.stored == 8  # MetaSchedule's 1e10 failure marker is an error, not a latency
    assert c.scan({"error": None}).num_rows == 7
    with pytest.raises(CorpusError, match="not a MetaSchedule JSON database"):
        import_ms(c, tmp_path)


def test_cli_import_then_export(tmp_path, capsys, ms_database):
    from cluster.cli import main

    work_dir, _, target, _ = ms_database
    root = tmp_path / "c"
    assert main(["corpus", "import-ms", str(work_dir), "--corpus", str(root)]) == 0
    assert "8 new" in capsys.readouterr().out
    assert main(["corpus", "import-ms", str(work_dir), "--corpus", str(root)]) == 0
    assert "0 new, 8 already stored" in capsys.readouterr().out
    hw = key_of_target(target)
    assert main(["corpus", "export-ms", str(tmp_path / "o"), "--hardware-key", hw, "--all", "--corpus", str(root)]) == 0
    assert "wrote 8 record(s) of 1 workload(s)" in capsys.readouterr().out
    assert main(["corpus", "export-ms", str(tmp_path / "o"), "--hardware-key", hw, "--corpus", str(root)]) == 2
    assert main(["corpus", "export-ms", str(tmp_path / "o"), "--hardware-key", hw, "--overwrite", "--corpus", str(root)]) == 0
    assert len((tmp_path / "o" / "database_tuning_record.json").read_text().splitlines()) == 1


def test_a_best_record_that_leaves_an_output_unwritten_is_named_with_why(cpu_hw):
    """MetaSchedule@256's and @1024's whole-model builds of MobileNetV2 differed from PyTorch; a
    database whose fastest record of a workload writes 112 of its 113 padded rows says which."""
    import torch
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from collectors.ms_database import unwritten_best
    from collectors.sketches import design_space, unwritten_output
    from collectors.tasks import extract_tasks, import_relax

    module = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 1), torch.nn.ReLU6(), torch.nn.ZeroPad2d((0, 1, 0, 1))).eval()
    args = (torch.randn(1, 4, 16, 16),)
    task = next(t for t in extract_tasks((module, args), cpu_hw, model_name="m", relax_mod=import_relax(module, args))
                if t.op_kind == "conv2d")
    traces = {}
    for sketch in design_space(task.mod, cpu_hw):
        sch = Schedule(task.mod)
        sketch.trace.apply_to_schedule(sch, remove_postproc=True)
        traces[unwritten_output(sch.mod) is None] = sketch.trace
    db = ms.database.MemoryDatabase()
    wl = db.commit_workload(task.mod)
    target = cpu_hw.tvm_target()
    db.commit_tuning_record(ms.database.TuningRecord(traces[True], wl, [2e-6], target))
    assert unwritten_best(db) == []  # the fastest writes every element
    db.commit_tuning_record(ms.database.TuningRecord(traces[False], wl, [1e-6], target))
    db.commit_tuning_record(ms.database.TuningRecord(traces[False], wl, [1e10], target))  # a failure: never the best
    (found,) = unwritten_best(db)
    assert found.startswith(f"{workload_key(task.mod)}: ") and "4096 times for the 4624 elements" in found
