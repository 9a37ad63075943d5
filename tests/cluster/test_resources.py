"""Node roles as Ray resources and the `ray start` line (no Ray needed)."""
import json
import shlex

import pytest

from cluster.resources import hw_resource, keys_in_resources, node_resources, ray_start_command
from collectors.hardware import Hardware


def _cpu(key="cpu-znver4-2c"):
    return Hardware(key=key, kind="cpu", arch="znver4", cores=2, vector_bits=512,
                    target={"kind": "llvm", "mcpu": "znver4", "num-cores": 2})


def _gpu(key="cuda-sm_90-h200"):
    return Hardware(key=key, kind="cuda", arch="sm_90", cores=132, vector_bits=1024, target={"kind": "cuda"})


def test_cpu_node_has_one_measure_slot():
    assert node_resources(_cpu()) == {"hw:cpu-znver4-2c": 1.0, "measure:cpu-znver4-2c": 1.0}


def test_gpu_node_has_one_slot_per_gpu_and_cpu_cannot_have_more():
    res = node_resources([_gpu(), _cpu()], {"cuda-sm_90-h200": 8})
    assert res["measure:cuda-sm_90-h200"] == 8 and res["measure:cpu-znver4-2c"] == 1
    with pytest.raises(ValueError, match="cpu-znver4-2c"):
        node_resources(_cpu(), 2)


def test_ray_start_line_round_trips_through_a_shell():
    res = node_resources(_gpu(), 2)
    line = ray_start_command(res, address="10.0.0.1:6379", num_gpus=2)
    argv = shlex.split(line)
    assert argv[:3] == ["ray", "start", "--address=10.0.0.1:6379"] and "--num-gpus=2" in argv
    flag = next(a for a in argv if a.startswith("--resources="))
    assert json.loads(flag.split("=", 1)[1]) == {"hw:cuda-sm_90-h200": 1, "measure:cuda-sm_90-h200": 2}
    head = shlex.split(ray_start_command(res, head=True, port=7000))
    assert "--head" in head and "--port=7000" in head
    with pytest.raises(ValueError, match="exactly one"):
        ray_start_command(res)


def test_keys_in_cluster_resources_need_a_measure_slot():
    found = keys_in_resources({
        "CPU": 6.0, "hw:cpu-a-1c": 2.0, "measure:cpu-a-1c": 2.0,
        "hw:cuda-sm_90-x": 1.0, "measure:cuda-sm_90-x": 4.0, "hw:cpu-b-1c": 1.0,
    })
    assert {k: (c.nodes, c.slots) for k, c in found.items()} == {"cpu-a-1c": (2, 2), "cuda-sm_90-x": (1, 4)}


def test_bad_key_is_named():
    with pytest.raises(ValueError, match="'CPU X'"):
        hw_resource("CPU X")


def test_cli_prints_a_ray_start_line_for_this_machine(capsys):
    from cluster.cli import main

    assert main(["node-resources", "--head"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    argv = shlex.split(out[-1])
    assert argv[:3] == ["ray", "start", "--head"]
    res = json.loads(next(a for a in argv if a.startswith("--resources=")).split("=", 1)[1])
    keys = [k.split(":", 1)[1] for k in res if k.startswith("measure:")]
    assert keys and all(k.startswith(("cpu-", "cuda-")) for k in keys)
    assert main(["node-resources", "--expect", "cpu-not-this-1c"]) == 1
