"""`tlm train` through Ray Train V2: 2 DDP workers on CPU, registry, fine-tune, resume after a kill.

Each ``fit()`` costs ~25 s of Ray start-up (docs/STACK.md), so there are few: a pretrain
with 2 workers and a fine-tune from it (one test). A run killed mid-way (while it writes a
checkpoint) then resumed is in tests/faults/test_train_faults.py.
The sentences come from records measured on a fixed Zen 4; training only tokenizes them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.corpora import sentence_sets

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    return sentence_sets(tmp_path_factory.mktemp("train-job"))


def test_pretrain_on_two_workers_registers_a_loadable_model_and_finetunes_from_it(sets, tmp_path, capsys):
    from transformers import GPT2LMHeadModel

    from cluster.cli import main
    from storage import Corpus

    dataset, corpus = sets
    os.environ.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    out = tmp_path / "models"
    rc = main(["train", "--stage", "pretrain", "--dataset", str(dataset), "--preset", "tiny", "--workers", "2",
               "--max-steps", "4", "--eval-every", "2", "--batch-size", "2", "--corpus", str(corpus),
               "--out", str(out), "--name", "pt"])
    assert rc == 0
    assert '"model_id": "pt"' in capsys.readouterr().out
    model = GPT2LMHeadModel.from_pretrained(out / "pt", use_safetensors=True)
    assert model.config.n_layer == 2
    assert not list((out / "pt").glob("optimizer*")), "a finished model carries no optimizer state"
    with Corpus.open(corpus) as c:
        (row,) = c.models()
        assert row["model_id"] == "pt" and row["hardware_key"] is None and row["path"] == str((out / "pt").resolve())
        assert row["metrics"]["step"] == 4 and row["metrics"]["workers"] == 2
        assert "eval_loss" in row["metrics"] and row["data_snapshot"].startswith("pretrain.parquet:sha256:")

    rc = main(["train", "--stage", "finetune", "--hardware", "cpu-znver4-2c", "--base", "pt", "--dataset",
               str(dataset), "--workers", "1", "--max-steps", "2", "--eval-every", "2", "--batch-size", "2",
               "--corpus", str(corpus), "--out", str(out), "--name", "ft", "--layers", "1"])
    assert rc == 0
    # --layers 1: the student keeps the base's first block only (a cheaper forward) and loads as such
    assert GPT2LMHeadModel.from_pretrained(out / "ft", use_safetensors=True).config.n_layer == 1
    with Corpus.open(corpus) as c:
        ft = c.newest_model("cpu-znver4-2c")
        assert ft["model_id"] == "ft" and ft["base_model_id"] == "pt"
    info = json.loads((out / "ft" / "tlm_model.json").read_text())
    assert info["stage"] == "finetune" and info["train"]["loss_weighting"] == "latency"
    assert info["train"]["layers"] == 1 and info["model_config"]["n_layer"] == 1
    assert main(["models", "--corpus", str(corpus)]) == 0
    listing = capsys.readouterr().out
    assert "ft" in listing and "cpu-znver4-2c" in listing and "pt" in listing


def test_bad_training_options_are_one_line_errors(sets, tmp_path, capsys):
    from cluster.cli import main

    dataset, corpus = sets
    cases = [
        (["--stage", "pretrain", "--preset", "huge"], "unknown --preset 'huge'"),
        (["--stage", "finetune", "--hardware", "cpu-znver4-2c"], "needs --hardware KEY and --base"),
        (["--stage", "finetune", "--hardware", "cpu-znver4-2c", "--base", "nope"], "unknown model 'nope'"),
        (["--stage", "finetune", "--hardware", "Bad Key", "--base", "x"], "hardware key 'Bad Key'"),
        (["--stage", "pretrain", "--workers", "0"], "--workers must be >= 1"),
        (["--stage", "pretrain", "--eval-batches", "-1"], "eval_batches must be >= 0, got -1"),
        (["--stage", "pretrain", "--layers", "1"], "a pretrained model's shape is its preset"),
    ]
    for extra, message in cases:
        rc = main(["train", "--dataset", str(dataset), "--corpus", str(corpus), "--out", str(tmp_path), *extra])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and "Traceback" not in err, (extra, err)
    rc = main(["train", "--stage", "pretrain", "--dataset", str(tmp_path / "none"), "--out", str(tmp_path)])
    assert rc == 2 and "tlm dataset build" in capsys.readouterr().err


def test_shipped_base_is_the_pretrained_model(tmp_path, monkeypatch):
    from tlm.service.catalog import NoModel, resolve_model

    for name, stage in (("a-finetuned", "finetune"), ("b-pretrained", "pretrain"), ("c-finetuned", "finetune")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tlm_model.json").write_text(json.dumps({"stage": stage, "model_config": {}}))
    (tmp_path / "not-a-model").mkdir()
    monkeypatch.chdir(tmp_path)
    m = resolve_model("b-pretrained", None)
    assert (m.path, m.model_id) == (str(tmp_path / "b-pretrained"), "b-pretrained"), \
        "a relative directory is made absolute (Ray Train workers run elsewhere)"
    m = resolve_model("shipped", None, root=str(tmp_path))
    assert (m.path, m.model_id, m.stage) == (str(tmp_path / "b-pretrained"), "b-pretrained", "pretrain")
    with pytest.raises(NoModel, match="no pretrained model"):
        resolve_model("shipped", None, root=str(tmp_path / "none"))
    with pytest.raises(NoModel, match="unknown model 'nope'.*a-finetuned"):
        resolve_model("nope", None, root=str(tmp_path))


def test_quality_hook_measures_greedy_schedules_of_held_out_tasks_against_the_corpus_best(tmp_path):
    """Measured here (this host's key): a task of a held-out model, tuned a little, then the
    model's greedy schedule measured the same way and compared; the closed loop appends it."""
    from tlm.service.evaluate import greedy_quality
    from collectors.hardware import detect_hardware
    from collectors.tuner import TuneConfig, tune_task
    from storage import Corpus
    from tests.helpers.workloads import make_task, matmul_relu_mod
    from tlm.model.network import build_model, model_config, save_model
    from tlm.model.tokenizer import build_tokenizer

    hw = detect_hardware("cpu")
    task = make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul")
    with Corpus.open(tmp_path / "c") as c:
        c.register_hardware(hw.key, target=hw.target, description="this host")
        c.register_workload(task.workload_key, task_name=task.task_name, tvmscript=task.tvmscript,
                            op_kind=task.op_kind, flops=2.0 * 64 * 96 * 128)
        c.register_workload_model(task.workload_key, model="held", weight=1)
        tune_task(task, hw, TuneConfig(trials=4, strategy="replay-trace", number=1, min_repeat_ms=1),
                  on_records=c.append)
    tok = build_tokenizer()
    cfg = model_config("tiny", tok, 400)
    save_model(build_model(cfg), tok, cfg, str(tmp_path / "m"))
    metrics = greedy_quality(str(tmp_path / "c"), hw.key, ("held",), tasks=2, append=True)(str(tmp_path / "m"))
    assert metrics["greedy_tasks"] == 1 and metrics["greedy_errors"] == 0
    (row,) = metrics["greedy_per_task"]
    assert row["ratio"] == pytest.approx(row["greedy_s"] / row["corpus_best_s"]) and row["ratio"] > 0
    with Corpus.open(tmp_path / "c") as c:
        assert "tlm:m" in set(c.scan(columns=["tuner"]).column("tuner").to_pylist())


def test_one_model_for_several_keys_learns_their_rows_and_records_them(sets, tmp_path):
    """``--hardware A,B``: the rows of every key named; the model's info lists them (the catalog
    serves each of them with it); a key without rows is named in the error."""
    from cluster.train_job import TrainJob, prepare
    from tlm.model.train import TrainConfig

    dataset, _ = sets
    cfg = TrainConfig(stage="finetune", batch_size=2)
    base = str(ROOT / "models" / "tlm-small-pretrain")

    def spec(*keys: str) -> dict:
        job = TrainJob(dataset_dir=str(dataset), storage_path=str(tmp_path), name="-".join(keys), base_path=base,
                       hardware_keys=keys)
        return prepare(cfg, job)

    both = spec("cpu-znver4-2c", "cpu-rocketlake-2c")
    one = prepare(cfg, TrainJob(dataset_dir=str(dataset), storage_path=str(tmp_path), name="one", base_path=base,
                                hardware_key="cpu-znver4-2c"))
    assert both["rows"] == one["rows"] and both["rows"]["train"] > 0  # the set holds Zen 4 rows only
    assert both["info"]["hardware_keys"] == ["cpu-znver4-2c", "cpu-rocketlake-2c"]
    assert both["info"]["hardware_key"] is None and one["info"]["hardware_keys"] == ["cpu-znver4-2c"]
    with pytest.raises(ValueError, match="no training sentences for hardware cpu-rocketlake-2c"):
        spec("cpu-rocketlake-2c", "cpu-icelake-2c")
    with pytest.raises(ValueError, match="--layers 5: the base model has 4 blocks"):
        prepare(TrainConfig(stage="finetune", batch_size=2, layers=5),
                TrainJob(dataset_dir=str(dataset), storage_path=str(tmp_path), name="deep", base_path=base,
                         hardware_key="cpu-znver4-2c"))
