"""``tlm adapt`` end to end on this machine: the nearest model's candidates measured, a model
fine-tuned on them and registered for this key (tiny zoo variants, a tiny model, 4 measurements)."""
from __future__ import annotations

import os

import pytest

from cluster.cli import main

pytestmark = pytest.mark.slow  # Ray Train start-up, real measurements


@pytest.fixture
def models_root(tmp_path):
    """A tiny random model registered for a made-up key of the host's vector width, so the host's
    key has no model of its own and falls back to it."""
    from collectors.hardware import detect_hardware
    from tlm.model.network import build_model, model_config, save_model
    from tlm.model.tokenizer import build_tokenizer

    host = detect_hardware("cpu")
    tok = build_tokenizer()
    cfg = model_config("tiny", tok, 400)
    other = host.key.rsplit("-", 1)[0] + "-64c"
    save_model(build_model(cfg, seed=0), tok, cfg, str(tmp_path / "near"), info={"stage": "finetune", "hardware_key": other})
    return tmp_path


def test_adapt_measures_the_nearest_models_candidates_fine_tunes_and_registers(tmp_path, models_root, monkeypatch, capsys):
    from collectors.hardware import detect_hardware
    from storage import Corpus
    from tlm.service import catalog

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    key = detect_hardware("cpu").key
    corpus = tmp_path / "corpus"
    args = ["adapt", "--small", "--models", "resnet50", "--measurements", "4", "--per-task", "2", "--epochs", "1",
            "--models-dir", str(models_root), "--corpus", str(corpus), "--out", str(tmp_path / "models"), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "base near:" in out.err and "is the nearest" in out.err and f"adapted adapt-{key}-4" in out.out
    with Corpus.open(corpus) as c:
        rows = c.scan(columns=["tuner", "latency_s", "error", "workload_key"]).to_pylist()
        assert len(rows) == 4 and {r["tuner"] for r in rows} == {"tlm:near"}
        from collectors.tasks import tasks_for_models
        from collectors.zoo import HELD_OUT_MODELS

        judged = {t.workload_key for t in tasks_for_models(HELD_OUT_MODELS, detect_hardware("cpu"), small=True)}
        assert not judged & {r["workload_key"] for r in rows}, "adapt measured a workload of the judging set"
        model = c.newest_model(key)
        assert model["model_id"] == f"adapt-{key}-4" and model["base_model_id"] == "near"
        assert os.path.isdir(model["path"])
        assert catalog.serving_model(detect_hardware("cpu"), c, root=str(models_root)).entry.model_id == f"adapt-{key}-4"

    assert main(args[:-1] + ["--no-progress", "--dry-run"]) == 0  # now the key has its own model: it is the base
    assert f"base adapt-{key}-4: {key}'s own model" in capsys.readouterr().err
