"""The corpus-trained cost model (collectors/cost_model.py): it learns the speeds it was given,
leaves held-out workloads out, saves and loads to the same predictions, and hands a search a
copy of its own. Records are the Zen 4 measurements of tests/helpers/corpora.py (features of a
Zen 4 target are computed, nothing is run)."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.cost_model import CostModel, CostModelConfig, evaluate
from collectors.tir import schedule_of
from tests.helpers.corpora import fixed_cpu, measured_corpus, small_tasks


@pytest.fixture(scope="module")
def trained(tmp_path_factory, znver4_hw):
    tasks = small_tasks()
    corpus = measured_corpus(tmp_path_factory.mktemp("cm") / "corpus", tasks, znver4_hw)
    model = CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key=znver4_hw.key))
    yield model, corpus, tasks
    corpus.close()


def _records(corpus, task, hw):
    rows = [r for r in corpus.scan({"hardware_key": hw.key, "workload_key": task.workload_key}).to_pylist()
            if r["latency_s"] is not None]
    return [schedule_of(task.mod, r["trace_json"]) for r in rows], np.array([r["latency_s"] for r in rows])


def test_it_learns_which_schedule_of_a_task_is_faster(trained, znver4_hw):
    model, corpus, tasks = trained
    assert model.summary.workloads == 2 and model.summary.records == 48
    report = evaluate(model, corpus, znver4_hw, [t.workload_key for t in tasks.values()])
    assert report["workloads"] == 2
    # on what it was trained on, its ranking follows the measured speeds
    assert report["spearman_mean"] > 0.5, report
    assert report["top5_geomean"] > report["random_geomean"]


def test_save_and_load_give_the_same_predictions(trained, znver4_hw, tmp_path):
    model, corpus, tasks = trained
    schedules, _ = _records(corpus, tasks["matmul"], znver4_hw)
    model.save(str(tmp_path))
    again = CostModel.load(str(tmp_path))
    assert np.allclose(again.predict(tasks["matmul"], znver4_hw, schedules),
                       model.predict(tasks["matmul"], znver4_hw, schedules))
    assert again.config == model.config


def test_excluded_workloads_are_never_trained_on(trained, znver4_hw):
    _, corpus, tasks = trained
    held = tasks["softmax"].workload_key
    model = CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key=znver4_hw.key, exclude_workloads=(held,)))
    assert model.summary.workloads == 1 and held not in model.xgb.data


def test_it_learns_only_from_the_tuners_it_is_given(trained, znver4_hw, tmp_path, capsys):
    """A ranker of a model's pools learns from that model's measured pools (tuner ``tlm-pool:...``)
    only: the searches' records are another distribution of programs."""
    from cluster.cli import main

    _, corpus, _ = trained
    only = CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key=znver4_hw.key, tuners=("replay",)))
    assert only.summary.workloads == 2 and only.summary.records == 16  # the 8 + 8 random samples, not the 32 searched
    with pytest.raises(ValueError, match="no usable record"):
        CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key=znver4_hw.key, tuners=("tlm-pool:",)))
    assert main(["cost-model", "fit", "--corpus", str(corpus.root), "--hardware", znver4_hw.key,
                 "--out", str(tmp_path / "m"), "--held-out", "none", "--tuners", "evolutionary,nothing"]) == 0
    assert "32 records of 2 workloads" in capsys.readouterr().out
    assert CostModel.load(str(tmp_path / "m")).config.tuners == ("evolutionary", "nothing")


def test_a_key_without_records_is_refused(trained, znver4_hw):
    _, corpus, _ = trained
    with pytest.raises(ValueError, match="cpu-nosuchcpu-2c"):
        CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key="cpu-nosuchcpu-2c"))


def test_a_search_gets_a_copy_it_may_change(trained, znver4_hw):
    model, corpus, tasks = trained
    schedules, _ = _records(corpus, tasks["softmax"], znver4_hw)
    before = model.predict(tasks["softmax"], znver4_hw, schedules)
    copy = model.search_model()
    copy.data.clear()
    copy.booster = None
    assert np.allclose(model.predict(tasks["softmax"], znver4_hw, schedules), before)
    assert len(model.xgb.data) == 2


def test_cli_fits_saves_and_judges_on_the_held_out_model(trained, znver4_hw, tmp_path, capsys):
    from cluster.cli import main

    _, corpus, _ = trained
    out = tmp_path / "model"
    assert main(["cost-model", "fit", "--corpus", str(corpus.root), "--hardware", znver4_hw.key,
                 "--out", str(out), "--held-out", "model_b"]) == 0
    text = capsys.readouterr().out
    assert "24 records of 1 workloads" in text and "held-out (model_b): 1 workloads, 24 records" in text
    again = CostModel.load(str(out))
    assert again.held_out["models"] == ["model_b"] and again.held_out["ranking"]["workloads"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--hardware", "Not A Key"], "Not A Key"),
    (["--hardware", "cpu-nosuchcpu-2c"], "has no hardware key 'cpu-nosuchcpu-2c' (it has: cpu-znver4-2c)"),
    (["--hardware", "cpu-znver4-2c", "--max-per-workload", "-1"], "--max-per-workload must be >= 0, got -1"),
])
def test_cli_mistakes_are_one_line_and_exit_2(trained, tmp_path, capsys, argv, message):
    from cluster.cli import main

    _, corpus, _ = trained
    assert main(["cost-model", "fit", "--corpus", str(corpus.root), "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.fixture(scope="module")
def two_keys(tmp_path_factory, znver4_hw):
    """The Zen 4 records (matmul and softmax) and a Zen 3 slice holding only the softmax's."""
    tasks = small_tasks()
    corpus = measured_corpus(tmp_path_factory.mktemp("cm2") / "corpus", tasks, znver4_hw)
    zen3 = fixed_cpu("znver3")
    corpus.register_hardware(zen3.key, target=zen3.target, description="test CPU")
    rows = corpus.scan({"hardware_key": znver4_hw.key, "workload_key": tasks["softmax"].workload_key}).to_pylist()
    cols = ("workload_key", "task_name", "sketch_id", "trace_json", "decisions_json", "latency_s", "error",
            "tuner", "tuner_params", "tvm_version", "run_secs")
    corpus.append([{k: r[k] for k in cols} | {"hardware_key": zen3.key} for r in rows])
    yield corpus, tasks, zen3
    corpus.close()


def test_other_keys_records_train_it_each_key_in_groups_of_its_own(two_keys, znver4_hw):
    corpus, tasks, zen3 = two_keys
    alone = CostModel.fit(corpus, zen3, CostModelConfig(hardware_key=zen3.key))
    assert alone.summary.workloads == 1 and alone.summary.by_key == {zen3.key: 24}
    both = CostModel.fit(corpus, zen3, CostModelConfig(hardware_key=zen3.key, also_from=(znver4_hw.key,)))
    assert both.summary.by_key == {zen3.key: 24, znver4_hw.key: 48} and both.summary.workloads == 3
    soft = tasks["softmax"].workload_key
    assert set(both.xgb.data) == {soft, f"{soft}@{znver4_hw.key}", f"{tasks['matmul'].workload_key}@{znver4_hw.key}"}
    # what Zen 4 measured of the matmul now ranks the matmul's schedules for the Zen 3
    report = evaluate(both, corpus, znver4_hw, [tasks["matmul"].workload_key])
    assert report["spearman_mean"] > 0.5, report


def test_cli_also_from_all_and_its_mistakes(two_keys, tmp_path, capsys):
    from cluster.cli import main

    corpus, _, zen3 = two_keys
    argv = ["cost-model", "fit", "--corpus", str(corpus.root), "--hardware", zen3.key, "--held-out", "none"]
    assert main([*argv, "--out", str(tmp_path / "m"), "--also-from", "all"]) == 0
    assert "records by key: cpu-znver3-2c 24, cpu-znver4-2c 48" in capsys.readouterr().out
    assert CostModel.load(str(tmp_path / "m")).config.also_from == ("cpu-znver4-2c",)
    assert main([*argv, "--out", str(tmp_path / "n"), "--also-from", "cpu-nosuchcpu-2c"]) == 2
    err = capsys.readouterr().err
    assert "has no hardware key 'cpu-nosuchcpu-2c' (it has: cpu-znver3-2c, cpu-znver4-2c)" in err
    assert "Traceback" not in err


def test_adapt_ranks_with_every_keys_records_once_there_are_enough(two_keys, monkeypatch, capsys):
    """``tlm adapt``'s cost model: the new key's records and the other keys' together, or none
    (served greedy) below the threshold counted over all of them."""
    from cluster.cli import adapt

    corpus, _, zen3 = two_keys
    monkeypatch.setattr(adapt, "MIN_COST_MODEL_RECORDS", 73)
    assert adapt.fit_ranker(corpus, zen3.key, progress=False) is None
    assert "no cost model: 72 measured records (24 of cpu-znver3-2c), fewer than 73" in capsys.readouterr().err
    monkeypatch.setattr(adapt, "MIN_COST_MODEL_RECORDS", 72)
    ranker = adapt.fit_ranker(corpus, zen3.key, progress=False)
    assert ranker.summary.by_key == {zen3.key: 24, "cpu-znver4-2c": 48}


def test_pairwise_objective_learns_the_order_and_loads_as_metaschedules_format(trained, znver4_hw, tmp_path):
    _, corpus, tasks = trained
    model = CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key=znver4_hw.key, objective="pairwise",
                                                             rounds=60))
    report = evaluate(model, corpus, znver4_hw, [t.workload_key for t in tasks.values()])
    assert report["spearman_mean"] > 0.5, report
    schedules, _ = _records(corpus, tasks["matmul"], znver4_hw)
    model.save(str(tmp_path))
    again = CostModel.load(str(tmp_path))
    assert again.config.objective == "pairwise"
    assert np.allclose(again.predict(tasks["matmul"], znver4_hw, schedules),
                       model.predict(tasks["matmul"], znver4_hw, schedules))


def test_an_unknown_objective_is_refused_by_name(trained, tmp_path, capsys):
    from cluster.cli import main

    with pytest.raises(ValueError, match="'lambdamart'.*metaschedule, pairwise"):
        CostModelConfig(hardware_key="cpu-znver4-2c", objective="lambdamart")
    _, corpus, _ = trained
    assert main(["cost-model", "fit", "--corpus", str(corpus.root), "--out", str(tmp_path), "--hardware",
                 "cpu-znver4-2c", "--objective", "lambdamart"]) == 2
    err = capsys.readouterr().err
    assert "'lambdamart'" in err and "Traceback" not in err


def test_refit_learns_another_objective_from_its_own_groups_and_leaves_itself_alone(trained, znver4_hw):
    """The seam bench/studies/rankers.py judges other objectives through: no record replayed,
    the original model unchanged, precomputed features scored as ``predict`` scores them."""
    from collectors.cost_model import features_of, spearman

    model, corpus, tasks = trained
    schedules, lat = _records(corpus, tasks["matmul"], znver4_hw)
    before = model.predict(tasks["matmul"], znver4_hw, schedules)
    other = model.refit(objective="pairwise", rounds=60)
    assert (other.config.objective, model.config.objective) == ("pairwise", "metaschedule")
    assert other.summary.records == model.summary.records == 48
    assert np.allclose(model.predict(tasks["matmul"], znver4_hw, schedules), before)
    feats = features_of(tasks["matmul"], znver4_hw, schedules)
    assert np.allclose(other.score(feats), other.predict(tasks["matmul"], znver4_hw, schedules))
    assert not np.allclose(other.score(feats), before)
    assert spearman(other.score(feats), -lat) > 0.5


def test_mlp_objective_ranks_is_deterministic_and_round_trips_through_its_directory(trained, znver4_hw, tmp_path):
    """MetaSchedule's MLP ranker (issue 32, item 7) on the same records: it learns the matmul's
    order, the same seed gives the same scores, and save/load gives identical predictions."""
    from collectors.cost_model import spearman
    from collectors.mlp_cost_model import MLP_FILE

    base, corpus, tasks = trained
    config = CostModelConfig(hardware_key=znver4_hw.key, objective="mlp", epochs=100)
    model = CostModel.fit(corpus, znver4_hw, config)
    schedules, lat = _records(corpus, tasks["matmul"], znver4_hw)
    scores = model.predict(tasks["matmul"], znver4_hw, schedules)
    assert scores.shape == (len(schedules),) and scores.dtype == np.float64
    assert spearman(scores, -lat) > 0.5  # higher is faster
    # the same records and seed give the same model, fitted anew or refitted from the XGB model's groups
    assert np.array_equal(base.refit(objective="mlp", epochs=100).predict(tasks["matmul"], znver4_hw, schedules),
                          scores)
    # one program alone scores as it does in its pool (one divisor, fixed at training)
    assert np.allclose(model.predict(tasks["matmul"], znver4_hw, schedules[:1]), scores[:1])
    model.save(str(tmp_path))
    assert (tmp_path / MLP_FILE).exists()
    again = CostModel.load(str(tmp_path))
    assert again.config == model.config and again.mlp is not None
    assert np.array_equal(again.predict(tasks["matmul"], znver4_hw, schedules), scores)
    assert model.search_model().booster is not None  # a seeded search still gets MetaSchedule's XGBModel
