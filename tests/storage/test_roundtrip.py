"""Append, reopen, read back: the corpus returns exactly what was stored, once."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from storage import RECORD_SCHEMA, Corpus, make_record_id

HW = "cpu-znver4-2c"


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["record_id"])


def test_append_reopen_same_rows(corpus_root, index_url, records):
    root = corpus_root
    c = Corpus.open(root, index_url=index_url)
    res = c.append(records(50, error_every=7))
    assert res.rows == 50 and res.duplicates == 0 and res.part_path.startswith(f"hardware={HW}/part-")
    before = _rows(c.scan())
    c.close()
    c2 = Corpus.open(root, index_url=index_url)
    after = c2.scan()
    assert after.schema == RECORD_SCHEMA
    assert _rows(after) == before
    assert len(before) == 50
    # every input value survived, and the ids are the content hashes
    src = {make_record_id(r["workload_key"], r["hardware_key"], r["trace_json"]): r for r in records(50, error_every=7)}
    for row in before:
        want = src[row["record_id"]]
        assert row["latency_s"] == want.get("latency_s")
        assert row["error"] == want.get("error")
        assert row["run_secs"] == want.get("run_secs", [])
        assert row["sketch_id"] == -1 and row["created_at"] is not None
    c2.close()


def test_append_is_idempotent(corpus, records):
    first = corpus.append(records(20))
    again = corpus.append(records(20))
    assert (again.rows, again.duplicates, again.part_path) == (0, 20, None)
    overlap = corpus.append(records(20, start=10))  # 10 old + 10 new
    assert (overlap.rows, overlap.duplicates) == (10, 10)
    table = corpus.scan()
    assert table.num_rows == 30 == pc.count_distinct(table["record_id"]).as_py()
    assert corpus.stats()["records"] == 30 and corpus.stats()["parts"] == 2
    assert first.rows == 20


def test_duplicates_within_one_batch_stored_once(corpus, records):
    batch = records(5) + records(5)  # every record twice
    res = corpus.append(batch)
    assert (res.rows, res.duplicates) == (5, 5)
    assert corpus.scan().num_rows == 5


def test_arrow_table_input_and_several_hardware_keys(corpus, records):
    rows = records(6) + records(4, hardware="cuda-sm_90-h200")
    table = pa.Table.from_pylist(rows)  # inferred types: large values, int64 etc. are cast when safe
    res = corpus.append(table)
    assert res.rows == 10 and len(res.part_paths) == 2
    assert corpus.scan({"hardware_key": "cuda-sm_90-h200"}).num_rows == 4
    assert corpus.stats()["by_hardware"]["cuda-sm_90-h200"]["parts"] == 1


def test_scan_filters(corpus, records):
    corpus.append(records(30, workloads=3, error_every=5))
    wk = f"{1:016x}"
    by_dict = corpus.scan({"workload_key": wk})
    assert by_dict.num_rows == 10 and set(by_dict["workload_key"].to_pylist()) == {wk}
    by_list = corpus.scan({"workload_key": [wk, f"{2:016x}"]})
    assert by_list.num_rows == 20
    errors = corpus.scan(pc.field("error").is_valid())
    assert errors.num_rows == 6
    assert corpus.scan({"error": None}).num_rows == 24
    batches = list(corpus.scan_batches({"workload_key": wk}))
    assert sum(b.num_rows for b in batches) == 10


def test_scan_of_empty_corpus_has_schema(corpus):
    t = corpus.scan()
    assert t.num_rows == 0 and t.schema == RECORD_SCHEMA


def test_top_k_fastest_successes_first(corpus, records):
    corpus.append(records(40, workloads=2, error_every=3))
    corpus.append(records(40, workloads=2, error_every=3, start=40, seed=1))
    wk = f"{0:016x}"
    everything = corpus.scan({"workload_key": wk, "hardware_key": HW})
    ok = everything.filter(pc.is_valid(everything["latency_s"]))
    want = sorted(ok["latency_s"].to_pylist())[:5]
    top = corpus.top_k(wk, HW, 5)
    assert top.schema == RECORD_SCHEMA
    assert top["latency_s"].to_pylist() == want
    assert top["error"].null_count == 5
    # the rows are the full records, identical to what scan returns for them
    by_id = {r["record_id"]: r for r in everything.to_pylist()}
    for r in top.to_pylist():
        assert r == by_id[r["record_id"]]
    assert corpus.top_k(wk, "cpu-other-1c", 3).num_rows == 0
    with pytest.raises(ValueError, match="k must be"):
        corpus.top_k(wk, HW, 0)


def test_best_latencies_are_the_fastest_success_per_workload_from_the_index(corpus, records):
    corpus.append(records(40, workloads=3, error_every=3))
    want: dict = {}
    for r in corpus.scan({"hardware_key": HW}).to_pylist():
        if r["latency_s"] is not None:
            want[r["workload_key"]] = min(want.get(r["workload_key"], float("inf")), r["latency_s"])
    assert want and corpus.best_latencies(HW) == pytest.approx(want)
    assert corpus.best_latencies("cpu-other-1c") == {}


def test_parts_readable_without_our_code(corpus, records):
    corpus.append(records(12))
    corpus.append(records(8, hardware="cuda-sm_90-h200", start=100))
    from tests.helpers.records import local_dir

    root = local_dir(corpus)
    dset = ds.dataset(root, format="parquet", partitioning="hive", ignore_prefixes=[".", "_", "quarantine", "index"])
    table = dset.to_table()
    assert table.num_rows == 20
    assert set(table["hardware"].to_pylist()) == {HW, "cuda-sm_90-h200"}
    duckdb = pytest.importorskip("duckdb")
    n, n_hw = duckdb.sql(
        f"SELECT count(*), count(DISTINCT hardware) FROM read_parquet('{root}/hardware=*/part-*.parquet', hive_partitioning=true)"
    ).fetchall()[0]
    assert (n, n_hw) == (20, 2)
    lat = duckdb.sql(
        f"SELECT min(latency_s) FROM read_parquet('{root}/hardware=*/part-*.parquet') WHERE hardware_key = '{HW}'"
    ).fetchall()[0][0]
    assert lat == pytest.approx(min(x for x in corpus.scan({"hardware_key": HW})["latency_s"].to_pylist() if x))


def test_registry_runs_and_task_status(corpus):
    wk = "00000000000000aa"
    corpus.register_workload(wk, task_name="matmul", tvmscript="# T", flops=2.0e6, op_kind="matmul")
    corpus.register_workload(wk, flops=4.0e6)  # later call updates, keeps the rest
    w = corpus.workload(wk)
    assert (w["task_name"], w["flops"], w["op_kind"]) == ("matmul", 4.0e6, "matmul")
    corpus.register_workload_model(wk, model="resnet50", weight=3)
    assert corpus.workloads()[0]["models"] == {"resnet50": 3.0}
    corpus.register_hardware(HW, target={"kind": "llvm", "num-cores": 2}, description="2 cores")
    assert corpus.hardware_info(HW)["target"] == {"kind": "llvm", "num-cores": 2}

    assert corpus.task_status(wk, HW, "evolutionary", 64) is None
    run = corpus.start_run("collect", {"trials": 64})
    corpus.set_task_status(wk, HW, "evolutionary", 64, "running", run_id=run)
    corpus.set_task_status(wk, HW, "evolutionary", 64, "done", run_id=run, records=64)
    assert corpus.task_status(wk, HW, "evolutionary", 64) == "done"
    assert corpus.task_status(wk, HW, "evolutionary", 32) is None
    corpus.set_task_status(wk, "cuda-sm_90-h200", "evolutionary", 64, "failed", run_id="other")
    (row,) = corpus.task_statuses(run_id=run)
    assert (row["workload_key"], row["status"], row["records"], row["trials"]) == (wk, "done", 64, 64)
    assert [r["status"] for r in corpus.task_statuses()] == ["done", "failed"]
    assert [r["run_id"] for r in corpus.task_statuses(hardware_key="cuda-sm_90-h200")] == ["other"]
    corpus.finish_run(run, "done")
    (r,) = corpus.runs()
    assert (r["run_id"], r["kind"], r["status"], r["params"]) == (run, "collect", "done", {"trials": 64})
    assert r["finished_at"] >= r["started_at"]
    with pytest.raises(Exception, match="unknown run id"):
        corpus.finish_run("nope")


def test_top_k_beyond_the_cached_fastest(corpus, records):
    """k larger than the index's payload cache mixes cached rows and rows read from Parquet."""
    from storage.corpus import TOP_CACHE

    corpus.append(records(TOP_CACHE + 10, workloads=1))
    corpus.append(records(TOP_CACHE + 10, workloads=1, start=100, seed=3))  # some faster, some slower
    everything = corpus.scan().to_pylist()
    want = sorted(everything, key=lambda r: (r["latency_s"], r["record_id"]))
    k = 2 * TOP_CACHE + 5
    got = corpus.top_k(f"{0:016x}", HW, k).to_pylist()
    assert got == want[:k]


def test_corpus_pickles_as_a_reopen(corpus, records):
    import pickle

    corpus.append(records(7))
    clone = pickle.loads(pickle.dumps(corpus))
    assert clone is not corpus and clone.root == corpus.root and clone.index_url == corpus.index_url
    assert clone.scan().num_rows == 7
    assert clone.append(records(3, start=7)).rows == 3
    assert corpus.scan().num_rows == 10
    clone.close()


def test_empty_append_stores_nothing_and_does_not_raise(corpus):
    # A tuning batch in which nothing was measured hands over an empty list: that is no
    # error, and must not mark the task failed (it did, with "required column missing").
    for empty in ([], pa.Table.from_pylist([], schema=RECORD_SCHEMA)):
        result = corpus.append(empty)
        assert (result.rows, result.duplicates) == (0, 0)
    assert corpus.scan().num_rows == 0
