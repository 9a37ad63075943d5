"""Merging corpora of machines that share no disk: everything arrives once, damage stays out."""
from __future__ import annotations

import json

import pyarrow.compute as pc

from cluster.cli import main
from storage import Corpus, merge
from tests.helpers.records import HW, check_consistent, index_snapshot, local_dir, make_records

OTHER = "cpu-znver3-2c"


def _slice(root, hw: str, n: int, start: int = 0) -> Corpus:
    """A corpus of one machine: records, a workload, a hardware key, a run, a done unit, a model."""
    c = Corpus.open(root)
    c.register_hardware(hw, target={"kind": "llvm", "mcpu": hw.split("-")[1]}, description=f"machine {hw}")
    c.register_workload(f"{0:016x}", task_name="task0", tvmscript="# script", flops=1e6)
    c.register_workload_model(f"{0:016x}", model="resnet50", weight=3)
    run = c.start_run("collect", {"hardware": [hw]})
    c.append(make_records(n, hardware=hw, start=start))
    c.set_task_status(f"{0:016x}", hw, "evolutionary", 64, "done", run_id=run, records=n)
    c.finish_run(run)
    c.register_model(f"model-{hw}", path="/nowhere", hardware_key=hw, metrics={"top1": 0.5})
    return c


def test_merge_adds_everything_once(tmp_path):
    dest = _slice(tmp_path / "a", HW, 30)
    dest.register_workload(f"{1:016x}", task_name="task1")  # no TVMScript here; the source has one
    src = _slice(tmp_path / "b", OTHER, 20)
    src.register_workload(f"{1:016x}", task_name="task1", tvmscript="# other script")
    dest.append(make_records(5, hardware=OTHER, start=0))  # 5 of the source's records are already here

    rep = merge(dest, src)
    assert rep.ok and rep.records_read == 20
    assert (rep.records_added, rep.records_present) == (15, 5)
    assert rep.added_by_hardware == {OTHER: 15}
    assert rep.hardware_added == [OTHER] and dest.hardware_info(OTHER)["target"]["mcpu"] == "znver3"
    assert rep.workloads_filled == 1 and dest.workload(f"{1:016x}")["tvmscript"] == "# other script"
    assert dest.workload(f"{0:016x}")["tvmscript"] == "# script"
    assert (rep.runs_added, rep.task_status_added, rep.models_added) == (1, 1, 1)
    assert dest.task_status(f"{0:016x}", OTHER, "evolutionary", 64) == "done"
    assert {m["model_id"] for m in dest.models()} == {f"model-{HW}", f"model-{OTHER}"}
    scanned = dest.scan(columns=["record_id", "hardware_key"])
    assert scanned.num_rows == 50 == pc.count_distinct(scanned["record_id"]).as_py()
    assert check_consistent(dest) == 50
    assert dest.verify().ok

    again = merge(dest, src)  # twice: nothing new
    assert (again.records_added, again.records_present) == (0, 20)
    assert (again.runs_added, again.task_status_added, again.models_added, again.workloads_added) == (0, 0, 0, 0)
    before = index_snapshot(dest)
    dest.reindex()
    assert index_snapshot(dest)[1] == before[1]  # the merged index is what the parts say


def test_a_corrupt_part_or_a_forged_id_is_not_merged(tmp_path):
    src = Corpus.open(tmp_path / "b")
    src.append(make_records(10, hardware=OTHER))
    bad = src.append(make_records(10, hardware=OTHER, start=10)).part_path
    forged = make_records(1, hardware=OTHER, start=20)[0] | {"record_id": "0" * 32}
    src.append([forged])
    path = local_dir(src) / bad
    path.write_bytes(path.read_bytes()[:200])
    dest = Corpus.open(tmp_path / "a")

    rep = merge(dest, src)
    assert not rep.ok
    assert [p for p, _ in rep.bad_parts] == [bad] and "sha256" in rep.bad_parts[0][1]
    assert rep.bad_ids == 1 and rep.records_added == 10
    assert any("skipped part" in line for line in rep.lines())
    assert path.exists()  # the source is only read: its damage is reported, not moved
    assert check_consistent(dest) == 10


def test_cli_merge(tmp_path, capsys):
    _slice(tmp_path / "b", OTHER, 12).close()
    _slice(tmp_path / "a", HW, 3).close()
    args = ["corpus", "merge", str(tmp_path / "b"), "--corpus", str(tmp_path / "a")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"records: 12 added ({OTHER} 12)" in out
    assert main(args) == 0
    assert "records: 0 added (none), 12 already present" in capsys.readouterr().out
    assert main(["corpus", "stats", "--json", "--corpus", str(tmp_path / "a")]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 15

    assert main(["corpus", "merge", str(tmp_path / "nothing"), "--corpus", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not a corpus" in err and len(err.strip().splitlines()) == 1
    assert main(["corpus", "merge", str(tmp_path / "a"), "--corpus", str(tmp_path / "a")]) == 2
    assert "into itself" in capsys.readouterr().err
