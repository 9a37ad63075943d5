"""The models shipped in models/ load with safetensors only, carry their card and config, and
write valid programs for a task of the shipped corpus (built and checked for this host)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"
DATA = Path(__file__).resolve().parents[1] / "data" / "corpus"
SHIPPED = sorted(p for p in MODELS.glob("*/tlm_model.json")) if MODELS.is_dir() else []


def test_the_shipped_models_are_there():
    """A pretrained and a fine-tuned model are shipped; a deleted one fails here, loudly, instead
    of leaving the tests below with nothing to check."""
    stages = {json.loads(p.read_text()).get("stage") for p in SHIPPED}
    assert {"pretrain", "finetune"} <= stages, f"{MODELS}: shipped models {[p.parent.name for p in SHIPPED]}"


@pytest.mark.parametrize("info", SHIPPED, ids=lambda p: p.parent.name)
def test_a_shipped_model_loads_from_safetensors_with_its_card(info):
    from transformers import GPT2LMHeadModel

    from tlm.model.network import ModelConfig, load_model

    d = info.parent
    assert (d / "model.safetensors").exists() and not list(d.glob("*.bin")) and not list(d.glob("optimizer*"))
    model, tok, cfg = load_model(str(d))
    assert isinstance(model, GPT2LMHeadModel) and cfg == ModelConfig(**json.loads(info.read_text())["model_config"])
    assert len(tok) == cfg.vocab_size and model.config.n_positions == cfg.n_positions
    card = (d / "README.md").read_text()
    metrics = json.loads(info.read_text())["final_metrics"]
    assert f"{metrics['eval_loss']:.4f}" in card, "the card quotes the model's own metrics file"


@pytest.mark.parametrize("info", SHIPPED, ids=lambda p: p.parent.name)
def test_a_shipped_model_writes_valid_schedules_for_a_corpus_task(info, tmp_path):
    import shutil

    from collectors.hardware import detect_hardware
    from collectors.tasks import task_from_index
    from storage import Corpus
    from tlm.service.generator import generate
    from tlm.model.network import load_model

    model, tok, _ = load_model(str(info.parent))
    shutil.copy(DATA / "index.sqlite", tmp_path / "index.sqlite")  # never touch the checkout's index
    with Corpus.open(tmp_path, index_url=f"sqlite:///{tmp_path / 'index.sqlite'}") as c:
        w = next(w for w in c.workloads() if w["task_name"] == "conv2d3" and "mobilenetv2" in (w.get("models") or {}))
    g = generate(task_from_index(w), detect_hardware("cpu"), model, tok, k=2)
    assert len(g.candidates) == 2 and all(c.schedule is not None for c in g.candidates)


def test_the_catalog_finds_the_shipped_models_without_being_told_where():
    """What `tlm demo`, `tlm compile` and `bench.quality` fall back on: the catalog's default is
    this repository's models/ (a move of the catalog once left it pointing at tlm/models, and the
    demo silently trained a tiny model from scratch instead)."""
    from tlm.service.catalog import SHIPPED_MODELS, pretrained_model, shipped_models

    assert Path(SHIPPED_MODELS).resolve() == MODELS.resolve()
    assert {m.model_id for m in shipped_models()} == {p.parent.name for p in SHIPPED}
    assert pretrained_model().model_id in {p.parent.name for p in SHIPPED}


def test_the_fine_tuned_model_ships_a_cost_model_held_out_like_itself_that_ranks_its_pool(tmp_path):
    """models/<fine-tuned>/cost_model.tar: found by the catalog, trained on its own key with the
    model's held-out workloads left out, and ranking a sampled pool of a held-out task."""
    import shutil

    from collectors.hardware import detect_hardware
    from collectors.tasks import task_from_index
    from storage import Corpus
    from tlm.model.network import load_model, read_model_info
    from tlm.service.catalog import ranker_of
    from tlm.service.generator import generate

    tuned = [p.parent for p in SHIPPED if json.loads(p.read_text()).get("stage") == "finetune"]
    assert tuned, "no fine-tuned model shipped"
    d = tuned[0]
    ranker = ranker_of(str(d))
    assert ranker is not None, f"{d} ships no cost_model.tar"
    info = read_model_info(str(d))
    assert ranker.config.hardware_key == info["hardware_key"]
    assert ranker.held_out["models"] == info["held_out_models"]
    shutil.copy(DATA / "index.sqlite", tmp_path / "index.sqlite")
    with Corpus.open(tmp_path, index_url=f"sqlite:///{tmp_path / 'index.sqlite'}") as c:
        w = next(w for w in c.workloads() if w["task_name"] == "conv2d3" and "mobilenetv2" in (w.get("models") or {}))
    assert w["workload_key"] in set(ranker.config.exclude_workloads), "a held-out task was trained on"
    model, tok, _ = load_model(str(d))
    g = generate(task_from_index(w), detect_hardware("cpu"), model, tok, k=3, ranker=ranker, pool=8)
    assert len(g.candidates) == 3 and all(c.predicted is not None for c in g.candidates)
    # the rules' program is served first whatever its prediction (generator.RULES_FIRST), its
    # variants and then the model's programs after it, each best predicted first
    if g.candidates[0].origin == "rules":
        assert all(c.origin != "rules" for c in g.candidates[1:])
    for origin in ("rules-variant", "model"):
        ranked = [c.predicted for c in g.candidates if c.origin == origin]
        assert ranked == sorted(ranked, reverse=True)


def test_every_key_of_the_shipped_corpus_ranks_with_its_own_cost_model(tmp_path):
    """Each key the shipped corpus measured has a cost model fitted for it (a shipped model's
    own, or models/cost-models/<key>), on every one of its records outside the held-out models,
    as `tlm adapt` fits it; the catalog hands it to whichever model writes that key's candidates."""
    import shutil

    import sqlalchemy as sa

    from collectors.cost_model import CostModel
    from collectors.zoo import HELD_OUT_MODELS
    from tlm.service.catalog import SHIPPED_COST_MODELS, ranker_for

    shutil.copy(DATA / "index.sqlite", tmp_path / "index.sqlite")
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'index.sqlite'}")
    with engine.connect() as conn:
        keys = [k for (k,) in conn.execute(sa.text("SELECT key FROM hardware_ids"))]
    engine.dispose()
    for key in keys:
        own = [p.parent for p in SHIPPED if json.loads(p.read_text()).get("hardware_key") == key]
        ranker, why = ranker_for(str(own[0]) if own else str(tmp_path / "none"), key)
        assert ranker is not None and ranker.config.hardware_key == key, (key, why)
        own_records = ranker.summary.by_key.get(key, ranker.summary.records)  # by_key: fits with other keys' too
        assert ranker.held_out["models"] == list(HELD_OUT_MODELS) and own_records > 1000, (key, own_records)
    for d in Path(SHIPPED_COST_MODELS).iterdir():
        if d.is_dir():
            cm = CostModel.load(str(d))
            assert d.name in keys and {cm.config.hardware_key, *cm.config.also_from} == set(keys), d
