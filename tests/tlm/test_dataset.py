"""Training sets from a corpus: pretraining samples, fastest measured records, held-out models.

The corpus is records measured on a 2-core Zen 4 (tests/tlm/data), so these tests mean that
fixed CPU (``znver4_hw``): they encode and lower for it, and run nothing.
"""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tlm.model.dataset import DatasetConfig, build_datasets, dataset_stats
from tests.helpers.corpora import MEASURED_RECORDS as DATA, measured_corpus
from tlm.language import decode


@pytest.fixture(scope="module")
def corpus(tasks, znver4_hw, tmp_path_factory):
    c = measured_corpus(tmp_path_factory.mktemp("corpus"), tasks, znver4_hw)
    yield c
    c.close()


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "sets"
    summary = build_datasets(corpus, str(out), DatasetConfig(pretrain_per_sketch=2, finetune_top_k=2,
                                                             held_out_models=("model_b",)), progress=False)
    return out, summary


def test_znver4_pretraining_sentences_cover_every_task_and_sketch(built, tasks, znver4_hw):
    from tlm.language.space import build_space

    out, summary = built
    tab = pq.read_table(out / "pretrain.parquet").to_pylist()
    assert summary.pretrain_rows == len(tab) > 0 and summary.skipped == {}
    for name in ("matmul", "softmax"):
        t = tasks[name]
        rows = [r for r in tab if r["workload_key"] == t.workload_key]
        assert {r["sketch_id"] for r in rows} == set(range(len(build_space(t, znver4_hw).sketches)))
        assert all(r["source"] == "sampled" and r["latency_s"] is None for r in rows)
        decode(rows[0]["text"], t, znver4_hw)  # every sentence is a program of its task


@pytest.mark.slow
def test_znver4_sampling_in_processes_writes_the_same_rows(built, corpus, tmp_path):
    out, summary = built
    two = build_datasets(corpus, str(tmp_path / "two"), DatasetConfig(pretrain_per_sketch=2, finetune_top_k=2,
                                                                      held_out_models=("model_b",)),
                         progress=False, workers=2)
    for f in ("pretrain.parquet", "finetune.parquet"):
        assert pq.read_table(tmp_path / "two" / f).to_pylist() == pq.read_table(out / f).to_pylist(), f
    assert (two.pretrain_rows, two.finetune_rows, two.skipped) == (summary.pretrain_rows, summary.finetune_rows, {})


def test_znver4_held_out_model_workloads_are_the_test_split(built, tasks):
    out, _ = built
    for f in ("pretrain.parquet", "finetune.parquet"):
        rows = pq.read_table(out / f).to_pylist()
        assert {r["split"] for r in rows} == {"train", "test"}, f  # both splits are there
        for r in rows:
            expect = "test" if r["workload_key"] == tasks["softmax"].workload_key else "train"
            assert r["split"] == expect


def test_znver4_finetuning_keeps_the_fastest_records_per_sketch(built, tasks):
    out, _ = built
    rows = pq.read_table(out / "finetune.parquet").to_pylist()
    recs = json.loads(DATA.read_text())
    assert rows
    for name in ("matmul", "softmax"):
        wk = tasks[name].workload_key
        mine = [r for r in rows if r["workload_key"] == wk]
        best = min(r["latency_s"] for r in recs if r["workload_key"] == wk)
        assert max(r["label"] for r in mine) == pytest.approx(1.0)
        assert min(r["latency_s"] for r in mine) == pytest.approx(best)
        by_sketch: dict = {}
        for r in mine:
            by_sketch.setdefault(r["sketch_id"], []).append(r["latency_s"])
        for sid, lat in by_sketch.items():
            assert len(lat) <= 2
            others = sorted(r["latency_s"] for r in recs if r["workload_key"] == wk and r["sketch_id"] == sid)
            assert sorted(lat) == pytest.approx(others[: len(lat)])


def test_znver4_top_k_zero_keeps_every_measured_record_with_its_speed(corpus, tmp_path):
    out = tmp_path / "all"
    summary = build_datasets(corpus, str(out), DatasetConfig(pretrain_per_sketch=0, finetune_top_k=0,
                                                             held_out_models=("model_b",)), progress=False)
    rows = pq.read_table(out / "finetune.parquet").to_pylist()
    recs = [r for r in json.loads(DATA.read_text()) if r["latency_s"] is not None]
    assert summary.pretrain_rows == 0 and summary.finetune_rows == len(rows) == len(recs)
    for r in rows:
        best = min(x["latency_s"] for x in recs if x["workload_key"] == r["workload_key"])
        assert r["label"] == pytest.approx(best / r["latency_s"]) and 0 < r["label"] <= 1


def test_znver4_stats_and_never_overwrite(built, corpus):
    out, _ = built
    stats = dataset_stats(str(out))
    ft = stats["finetune.parquet"]
    assert ft["rows"] > 0 and ft["decision_word_coverage"] == 1.0
    assert sum(ft["length_histogram"].values()) == ft["rows"]
    assert set(stats["pretrain.parquet"]["by_op_kind"]) == {"matmul", "reduction"}
    with pytest.raises(FileExistsError):
        build_datasets(corpus, str(out), DatasetConfig(pretrain_per_sketch=1), progress=False)


def test_znver4_cli_build_and_stats(corpus, tmp_path, capsys):
    from cluster.cli import main

    out = tmp_path / "cli"
    rc = main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(out), "--per-sketch", "1",
               "--top-k", "1", "--held-out", "model_a"])
    assert rc == 0
    assert "pretraining" in capsys.readouterr().out
    assert main(["dataset", "stats", str(out)]) == 0
    text = capsys.readouterr().out
    assert "length histogram" in text and "word coverage" in text
    # a directory that already holds a dataset, or none to read: the user's mistake, one line, exit 2
    assert main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    assert main(["dataset", "stats", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(tmp_path / "w0"), "--workers", "0"]) == 2
    assert "--workers must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_znver4_sets_load_with_ray_data(built):
    """The trainer reads the sets with Ray Data: same rows, text column intact, splits filterable."""
    import ray
    from ray.data.expressions import col

    out, _ = built
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)  # never another test's Ray
    read = []
    try:
        for name in ("pretrain.parquet", "finetune.parquet"):
            read.append(name)
            table = pq.read_table(out / name)
            ds = ray.data.read_parquet(str(out / name))
            assert ds.count() == table.num_rows > 0
            rows = ds.take_all()
            assert sorted(r["text"] for r in rows) == sorted(table.column("text").to_pylist())
            train = ds.filter(expr=col("split") == "train").count()
            assert train == sum(1 for s in table.column("split").to_pylist() if s == "train")
    finally:
        if started:
            ray.shutdown()
    assert len(read) == 2


def test_znver4_a_set_pinned_to_an_instant_leaves_later_records_out(corpus, tmp_path, capsys):
    """``measured_before``: a shipped model's set is rebuilt exactly from a corpus that has grown
    since (records measured at or after the instant are left out); a bad instant is one line, exit 2."""
    import datetime as dt

    from cluster.cli import main

    cfg = dict(pretrain_per_sketch=0, finetune_top_k=0, held_out_models=("model_b",))
    now = dt.datetime.now(dt.timezone.utc).isoformat()
    every = build_datasets(corpus, str(tmp_path / "now"), DatasetConfig(**cfg, measured_before=now), progress=False)
    assert every.finetune_rows == build_datasets(corpus, str(tmp_path / "all"), DatasetConfig(**cfg),
                                                 progress=False).finetune_rows > 0
    early = build_datasets(corpus, str(tmp_path / "early"), DatasetConfig(**cfg, measured_before="2001-01-01T00:00Z"),
                           progress=False)
    assert early.finetune_rows == 0 and early.skipped.get("measured at or after 2001-01-01T00:00Z", 0) > 0
    assert main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(tmp_path / "bad"),
                 "--measured-before", "yesterday"]) == 2
    assert "--measured-before 'yesterday'" in capsys.readouterr().err


def test_znver4_rules_rows_teach_the_rule_baselines_programs_of_training_workloads_only(corpus, tasks, znver4_hw,
                                                                                         tmp_path, capsys):
    """``rules``: the rules' program and its second opinions of every *training* workload, as
    fine-tuning rows of source "rules" (label 1), after the measured rows, which
    ``measured_repeats`` writes that many times in the training split (the test split once: it
    scores the teacher alone). Each rules row is the rules' program word for word."""
    from cluster.cli import main
    from collectors.rules import rule_variants
    from tlm.language import encode

    cfg = dict(pretrain_per_sketch=0, finetune_top_k=1, held_out_models=("model_b",))
    plain = build_datasets(corpus, str(tmp_path / "plain"), DatasetConfig(**cfg), progress=False)
    built = build_datasets(corpus, str(tmp_path / "rules"), DatasetConfig(**cfg, rules=True, measured_repeats=2),
                           progress=False)
    base = pq.read_table(tmp_path / "plain" / "finetune.parquet").to_pylist()
    rows = pq.read_table(tmp_path / "rules" / "finetune.parquet").to_pylist()
    measured = [r for r in rows if r["source"] == "measured"]
    assert measured == base + [r for r in base if r["split"] == "train"]
    ruled = rows[len(measured):]
    assert ruled and all(r["source"] == "rules" and r["label"] == 1.0 and r["split"] == "train" for r in ruled)
    assert built.finetune_rows == len(rows) and built.skipped == plain.skipped
    train_keys = {r["workload_key"] for r in base if r["split"] == "train"}
    for t in (t for t in tasks.values() if t.workload_key in {r["workload_key"] for r in base}):
        want = {encode(t, znver4_hw, p.schedule.trace).text for p in rule_variants(t, znver4_hw)}
        got = {r["text"] for r in ruled if r["workload_key"] == t.workload_key}
        assert got == (want if t.workload_key in train_keys else set()), t.task_name
    assert main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(tmp_path / "bad"),
                 "--rules", "--measured-repeats", "0"]) == 2
    assert "--measured-repeats must be a whole number >= 1, got 0" in capsys.readouterr().err


def test_znver4_rules_where_the_teacher_is_silent_give_one_answer_per_prompt(corpus, tmp_path, capsys):
    """``rules_unmeasured_only``: a (workload, sketch) with a measured training row gets no rules
    rows, so its prompt has one answer, the teacher's; the rules fill the sketches the teacher never
    measured, and the test split is the same as without it."""
    from cluster.cli import main

    cfg = dict(pretrain_per_sketch=0, finetune_top_k=1, held_out_models=("model_b",), rules=True)
    build_datasets(corpus, str(tmp_path / "all"), DatasetConfig(**cfg), progress=False)
    built = build_datasets(corpus, str(tmp_path / "silent"), DatasetConfig(**cfg, rules_unmeasured_only=True),
                           progress=False)
    every = pq.read_table(tmp_path / "all" / "finetune.parquet").to_pylist()
    rows = pq.read_table(tmp_path / "silent" / "finetune.parquet").to_pylist()
    group = lambda r: (r["workload_key"], r["hardware_key"], r["sketch_id"])  # noqa: E731
    measured = {group(r) for r in every if r["source"] == "measured" and r["split"] == "train"}
    kept = [r for r in every if r["source"] == "measured" or group(r) not in measured]
    assert rows == kept and len(kept) < len(every), "some rules rows answer a measured prompt in this corpus"
    assert built.skipped["rules: the teacher measured this sketch"] == len(every) - len(kept)
    # where the teacher measured nothing, every rules row stays
    early = dict(cfg, measured_before="2001-01-01T00:00Z")
    build_datasets(corpus, str(tmp_path / "early"), DatasetConfig(**early), progress=False)
    build_datasets(corpus, str(tmp_path / "early-silent"), DatasetConfig(**early, rules_unmeasured_only=True),
                   progress=False)
    ruled = pq.read_table(tmp_path / "early" / "finetune.parquet").to_pylist()
    assert ruled and ruled == pq.read_table(tmp_path / "early-silent" / "finetune.parquet").to_pylist()
    assert main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(tmp_path / "cli"), "--per-sketch",
                 "0", "--top-k", "1", "--held-out", "model_b", "--rules", "--rules-unmeasured-only"]) == 0
    assert pq.read_table(tmp_path / "cli" / "finetune.parquet").to_pylist() == rows
    assert main(["dataset", "build", "--corpus", str(corpus.root), "--out", str(tmp_path / "bad"),
                 "--rules-unmeasured-only"]) == 2
    assert "--rules-unmeasured-only needs --rules" in capsys.readouterr().err
