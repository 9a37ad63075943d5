"""Which model answers for a key: its own, else the nearest of its kind, else a clear NoModel."""
from __future__ import annotations

import json

import pytest

from collectors.hardware import hardware_for_key
from tlm.service.catalog import NoModel, serving_model, shipped_models

ROCKET, ZEN3, ZEN4 = "cpu-rocketlake-2c", "cpu-znver3-2c", "cpu-znver4-2c"


def _model_dir(root, name: str, **info) -> None:
    """A directory the catalog lists (its info file only: the catalog never loads weights)."""
    d = root / name
    d.mkdir()
    (d / "tlm_model.json").write_text(json.dumps({"stage": "finetune", "model_config": {}, **info}))


@pytest.fixture
def root(tmp_path):
    _model_dir(tmp_path, "a-rocket", hardware_key=ROCKET)
    _model_dir(tmp_path, "b-zen3", hardware_key=ZEN3)
    _model_dir(tmp_path, "c-multi", hardware_key=None, hardware_keys=[ROCKET, ZEN3])
    return tmp_path


def test_the_catalog_reads_every_key_a_model_learnt(root):
    listed = {m.model_id: m for m in shipped_models(str(root))}
    assert listed["c-multi"].hardware_keys == (ROCKET, ZEN3) and listed["c-multi"].hardware_key is None
    assert listed["a-rocket"].hardware_keys == (ROCKET,) and listed["c-multi"].stage == "finetune"


def test_own_model_first(root):
    s = serving_model(hardware_for_key(ROCKET), root=str(root))
    assert (s.entry.model_id, s.fallback) == ("a-rocket", False)


def test_a_multi_key_model_serves_the_keys_it_learnt_as_its_own(tmp_path):
    _model_dir(tmp_path, "c-multi", hardware_key=None, hardware_keys=[ROCKET, ZEN3])
    s = serving_model(hardware_for_key(ZEN3), root=str(tmp_path))
    assert (s.entry.model_id, s.fallback) == ("c-multi", False)


@pytest.mark.parametrize("key, expected", [
    (ZEN4, "c-multi"),  # AVX-512 like Rocket Lake: the multi-key model that learnt it wins the tie
    ("cpu-haswell-2c", "c-multi"),  # AVX2, 256-bit like Zen 3, which the multi-key model learnt too
    ("cpu-generic-2c", "c-multi"),  # no model has its 128-bit width: the multi-key model
    ("cpu-znver4-8c", "c-multi"),
])
def test_a_key_without_a_model_gets_the_nearest(root, key, expected):
    s = serving_model(hardware_for_key(key), root=str(root))
    assert s.fallback and s.entry.model_id == expected, s.why
    assert key in s.why and expected in s.why


@pytest.mark.parametrize("key, expected", [(ZEN4, "a-rocket"), ("cpu-haswell-2c", "b-zen3")])
def test_without_a_multi_key_model_the_same_vector_width_wins(tmp_path, key, expected):
    _model_dir(tmp_path, "a-rocket", hardware_key=ROCKET)
    _model_dir(tmp_path, "b-zen3", hardware_key=ZEN3)
    s = serving_model(hardware_for_key(key), root=str(tmp_path))
    assert s.entry.model_id == expected and "same vector width" in s.why


def test_no_model_of_the_kind_is_no_model(tmp_path):
    _model_dir(tmp_path, "p", hardware_key=None)  # pretrained: learnt no key, answers for none
    with pytest.raises(NoModel, match="none of its kind"):
        serving_model(hardware_for_key(ZEN4), root=str(tmp_path))


def test_a_key_ranks_with_its_own_cost_model_before_another_keys(tmp_path, znver4_hw):
    """Issue 34: a key the shipped corpus measured ranked its candidates with the fallback
    model's cost model of another CPU; its own (fitted on its records) comes first now."""
    from collectors.cost_model import CostModel, CostModelConfig
    from tests.helpers.corpora import measured_corpus, small_tasks
    from tlm.service.catalog import ranker_for

    with measured_corpus(tmp_path / "c", small_tasks(), znver4_hw) as corpus:
        fitted = CostModel.fit(corpus, znver4_hw, CostModelConfig(hardware_key=znver4_hw.key))
    other = CostModel(fitted.xgb, CostModelConfig(hardware_key="cpu-rocketlake-2c"), fitted.summary)
    model_dir, shipped = tmp_path / "model", tmp_path / "cost-models"
    other.save(str(model_dir))  # the model's own: fitted for another key
    ranker, why = ranker_for(str(model_dir), znver4_hw.key, cost_models=str(shipped))
    assert ranker.config.hardware_key == "cpu-rocketlake-2c" and "fitted for cpu-rocketlake-2c" in why
    fitted.save(str(shipped / znver4_hw.key))
    ranker, why = ranker_for(str(model_dir), znver4_hw.key, cost_models=str(shipped))
    assert ranker.config.hardware_key == znver4_hw.key and why == f"{znver4_hw.key}'s shipped cost model (48 records of {znver4_hw.key})"
    assert ranker_for(str(model_dir), "cpu-rocketlake-2c", cost_models=str(shipped))[1].startswith("the model's own")
    assert ranker_for(str(tmp_path / "none"), "cpu-icelake-2c", cost_models=str(shipped)) == (
        None, "no cost model: ranked by likelihood")


def test_a_command_on_a_key_with_no_model_chooses_the_model_the_server_would_serve():
    """On a new host (an Emerald Rapids, before it had a model of its own) ``bench.quality`` stopped
    with ``NoModel``; ``tlm compile`` and the benchmarks now choose as the server answers that key
    (the nearest shipped model, said), and a model the user names as named. A Zen 4 has no model."""
    from tlm.service.catalog import chosen_model

    new = chosen_model(hardware_for_key("cpu-znver4-2c"))
    assert new.entry.hardware_key in ("cpu-rocketlake-2c", "cpu-emeraldrapids-2c") and new.fallback  # AVX-512 both
    assert "cpu-znver4-2c has no model" in new.why and "nearest" in new.why
    own = chosen_model(hardware_for_key("cpu-emeraldrapids-2c"))
    assert own.entry.hardware_key == "cpu-emeraldrapids-2c" and not own.fallback
    named = chosen_model(hardware_for_key("cpu-znver4-2c"), "tlm-small-znver3-2c")
    assert named.entry.model_id == "tlm-small-znver3-2c" and not named.fallback
