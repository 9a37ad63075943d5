"""bench/gpu.py, the CPU-safe part of the CUDA path: the summary of a GPU corpus (synthetic rows)."""
from __future__ import annotations

import json

import pytest

from bench.gpu import main
from storage import Corpus

KEY = "cuda-sm_90-h200"


def _rec(wk: str, tuner: str, i: int, latency: float | None) -> dict:
    trace = json.dumps([[["SamplePerfectTile", [], [4, 64], ["v"]]], [[0, [i, 1, 1, 1]]]])
    out = {"workload_key": wk, "hardware_key": KEY, "trace_json": trace, "tuner": tuner}
    return out | ({"latency_s": latency, "run_secs": [latency]} if latency else {"error": "run error: synthetic"})


def test_tlm_against_the_search_per_held_out_workload(tmp_path, capsys):
    held, trained = f"{1:016x}", f"{2:016x}"
    with Corpus.open(tmp_path / "c") as c:
        c.register_workload(held, task_name="conv2d")
        c.register_workload_model(held, model="mobilenetv2")
        c.register_workload(trained, task_name="dense")
        c.register_workload_model(trained, model="resnet50")
        c.append([_rec(held, "tlm:tlm-gpu", 0, 2e-5), _rec(held, "tlm:tlm-gpu", 1, None),
                  _rec(held, "evolutionary", 2, 3e-5), _rec(held, "evolutionary", 3, 4e-5),
                  _rec(trained, "evolutionary", 4, 1e-5)])
    assert main([str(tmp_path / "c"), KEY, "--out", str(tmp_path / "gpu.json")]) == 0
    res = json.loads((tmp_path / "gpu.json").read_text())
    (t,) = res["tasks"]  # the trained-on workload is not judged
    assert t["tlm"] == {"best_s": 2e-5, "measured": 1, "errors": 1}
    assert t["evolutionary"]["measured"] == 2 and t["tlm_vs_search"] == pytest.approx(1.5)
    assert res["tlm_vs_search_geomean"] == pytest.approx(1.5)
    assert main([str(tmp_path / "none"), KEY]) == 2
