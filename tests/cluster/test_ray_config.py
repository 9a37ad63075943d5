"""ray_config.yaml (and the on-prem variant in docs/cluster.md) pass Ray's own validation, offline."""
import copy
import pathlib
import re

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(path):
    return yaml.safe_load((ROOT / path).read_text())


def test_ray_config_is_valid_and_heterogeneous():
    cfg = prepare_config(_load("ray_config.yaml"))
    validate_config(cfg)
    types = cfg["available_node_types"]
    measure = {name: [k for k in t["resources"] if k.startswith("measure:")] for name, t in types.items()}
    cpu = [n for n, ks in measure.items() if any(k.startswith("measure:cpu-") for k in ks)]
    gpu = [n for n, ks in measure.items() if any(k.startswith("measure:cuda-") for k in ks)]
    assert cpu and gpu, measure
    for name in cpu + gpu:
        res = types[name]["resources"]
        (slot,) = measure[name]
        key = slot.split(":", 1)[1]
        assert res[f"hw:{key}"] == 1
        assert res[slot] == res.get("GPU", 1), f"{name}: one measure slot per device"
    assert any("scripts/setup.sh" in c for c in cfg["setup_commands"]), "nodes must install the project"


def test_validation_catches_a_broken_config():
    """The check above can fail: a misspelt field is refused by Ray's schema."""
    cfg = prepare_config(_load("ray_config.yaml"))
    bad = copy.deepcopy(cfg)
    bad["available_node_types"]["cpu_znver4"]["resourcez"] = {}
    with pytest.raises(Exception):
        validate_config(bad)


def test_on_prem_variant_in_docs_is_valid():
    text = (ROOT / "docs" / "cluster.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    local = [yaml.safe_load(b) for b in blocks if "type: local" in b]
    assert local, "docs/cluster.md must show a provider: local config"
    cfg = prepare_config(local[0])
    validate_config(cfg)
    assert cfg["provider"]["type"] == "local"
