"""The schedule server: in process (Serve's local testing mode) for routing and every bad
input, then once for real over HTTP on loopback with ``tlm serve`` (start, requests, stop).

The models directory holds a tiny random GPT-2 registered for this host's key and a broken
one (weights that are not safetensors) for another key: that key must answer 503 and show
as unavailable while the server goes on serving.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.openapi import validate_response
from tests.helpers.workloads import matmul_tvmscript
from tlm.service.api import ApiError, ScheduleRequest

pytestmark = pytest.mark.slow  # Ray Serve start-up per module, a server subprocess

ROOT = Path(__file__).resolve().parents[2]
BROKEN_KEY = "cpu-broken-2c"
MATMUL = matmul_tvmscript(32, 64, 48)


def test_the_checked_in_serve_config_binds_loopback_and_builds_the_app():
    """First in the file: ``serve deploy`` builds the app in a fresh process, and once the
    local-testing app below has run, Serve can no longer pickle the FastAPI app in this one."""
    import importlib

    import yaml
    from ray.serve.deployment import Application

    cfg = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    assert cfg["http_options"]["host"] == "127.0.0.1" and cfg["proxy_location"] == "HeadOnly"
    (app_cfg,) = cfg["applications"]
    module, _, attr = app_cfg["import_path"].partition(":")
    build_app = getattr(importlib.import_module(module), attr)
    assert isinstance(build_app(app_cfg["args"]), Application)
    with pytest.raises(ValueError, match="unknown serve args"):
        build_app({"corpus": "x", "colour": "red"})


@pytest.fixture(scope="module")
def host_key():
    from collectors.hardware import detect_hardware

    return detect_hardware("cpu").key


@pytest.fixture(scope="module")
def models_root(tmp_path_factory, host_key):
    from tlm.model.network import build_model, model_config, save_model
    from tlm.model.tokenizer import build_tokenizer

    root = tmp_path_factory.mktemp("models")
    tok = build_tokenizer()
    cfg = model_config("tiny", tok, 400)
    save_model(build_model(cfg, seed=0), tok, cfg, str(root / "tiny-host"),
               info={"stage": "finetune", "hardware_key": host_key})
    save_model(build_model(cfg, seed=1), tok, cfg, str(root / "broken"),
               info={"stage": "finetune", "hardware_key": BROKEN_KEY})
    (root / "broken" / "model.safetensors").write_bytes(b"not safetensors")
    return root


@pytest.fixture(scope="module")
def handle(models_root):
    from ray import serve

    from cluster.serve import ScheduleServer

    h = serve.run(ScheduleServer.bind(models_root=str(models_root)), _local_testing_mode=True)
    yield h
    serve.shutdown()


def _answer(handle, **body):
    return handle.answer.remote(ScheduleRequest(**body)).result()


def test_in_process_a_tvmscript_task_gets_k_schedules(handle, host_key):
    r = _answer(handle, tvmscript=MATMUL, hardware=host_key, k=2)
    assert r.model_id == "tiny-host" and r.task_name == "mm" and len(r.candidates) == 2
    assert all(c.tvmscript and c.trace for c in r.candidates)


@pytest.mark.parametrize("body, status, words", [
    ({"tvmscript": "import os", "hardware": "HOST"}, 400, "import os is not allowed"),
    ({"tvmscript": "def f(:", "hardware": "HOST"}, 400, "does not parse"),
    ({"tvmscript": MATMUL, "hardware": "cuda-sm_00-nothing"}, 404, "no model for hardware 'cuda-sm_00-nothing'"),
    ({"tvmscript": MATMUL, "hardware": "Not A Key"}, 400, "is not a hardware key"),
    ({"workload_key": "0123456789abcdef", "hardware": "HOST"}, 404, "not in the server's corpus"),
])
def test_in_process_bad_requests_are_4xx_naming_the_problem(handle, host_key, body, status, words):
    body = {k: (host_key if v == "HOST" else v) for k, v in body.items()}
    with pytest.raises(ApiError) as e:
        _answer(handle, **body)
    assert e.value.status == status and words in e.value.message


def test_in_process_a_key_without_a_model_is_answered_by_the_nearest_and_says_so(handle, host_key):
    """Same CPU, another core count: no model of its own; the host's model answers (same vector
    width and ISA; the broken model's made-up key has neither), and the response and
    /v1/models say it is a fallback."""
    other = host_key.rsplit("-", 1)[0] + "-64c"
    r = _answer(handle, tvmscript=MATMUL, hardware=other)
    assert (r.model_id, r.fallback, r.hardware) == ("tiny-host", True, other) and r.candidates
    assert host_key in r.fallback_reason and "same vector width" in r.fallback_reason
    assert not _answer(handle, tvmscript=MATMUL, hardware=host_key).fallback
    rows = [m for m in handle.models.remote().result().models if m.hardware == other]
    assert [(m.model_id, m.fallback, m.status) for m in rows] == [("tiny-host", True, "loaded")]


def test_in_process_a_model_that_fails_to_load_marks_its_hardware_unavailable(handle, host_key):
    with pytest.raises(ApiError) as e:
        _answer(handle, tvmscript=MATMUL, hardware=BROKEN_KEY)
    assert e.value.status == 503 and "failed to load" in e.value.message
    models = {m.model_id: m for m in handle.models.remote().result().models}
    assert models["broken"].status == "unavailable" and models["broken"].error
    assert _answer(handle, tvmscript=MATMUL, hardware=host_key).candidates, "the replica keeps serving"
    assert models["tiny-host"].status == "loaded"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tlm_serve_over_http_on_loopback(models_root, host_key, tmp_path):
    """One real server: the token, every HTTP-level bad input, a measured schedule that builds
    and computes the right answer (the server checks it against the unscheduled program)."""
    import httpx

    port = _free_port()
    env = {**os.environ, "TLM_SERVE_TOKEN": "s3cret", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cluster.cli", "serve", "--port", str(port), "--models",
                             str(models_root)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "server did not come up in 180 s"
            time.sleep(1)
        auth = {"Authorization": "Bearer s3cret"}
        c = httpx.Client(base_url=url, timeout=120)
        body = {"tvmscript": MATMUL, "hardware": host_key, "k": 2, "measure": True}
        assert c.post("/v1/schedules", json=body).status_code == 401
        assert c.post("/v1/schedules", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/v1/models").status_code == 401
        r = c.post("/v1/schedules", json=body, headers=auth)
        assert r.status_code == 200, r.text
        out = r.json()
        assert all(x["error"] is None and x["latency_s"] > 0 for x in out["candidates"]), out["candidates"]
        assert out["best"] in (0, 1)
        r = c.post("/v1/schedules", json={**body, "colour": "red"}, headers=auth)
        assert r.status_code == 422 and "colour" in r.text
        r = c.post("/v1/schedules", json={**body, "workload_key": "0123456789abcdef"}, headers=auth)
        assert r.status_code == 422 and "exactly one" in r.text
        validate_response(r.json(), "422")  # as documented (schemathesis found a string where the schema says an object)
        r = c.post("/v1/schedules", json={**body, "k": 65}, headers=auth)
        assert r.status_code == 422 and "k" in r.text
        # non-finite numbers (Python's json writes them; a 500 before: the 422's echo of the input was not JSON)
        for bad in ('{"k": Infinity}', '{"k": NaN}', '{"rank": -Infinity}', '{"hardware": Infinity}'):
            raw = json.dumps(body)[:-1] + ", " + bad[1:]
            r = c.post("/v1/schedules", content=raw.encode(), headers={**auth, "content-type": "application/json"})
            assert r.status_code == 422 and bad[2:].split('"')[0] in r.text, (bad, r.status_code, r.text[:300])
        r = c.post("/v1/schedules", content=b" " * (2 << 20), headers={**auth, "content-type": "application/json"})
        assert r.status_code == 413 and "over the limit" in r.text
        r = c.post("/v1/schedules", json={**body, "tvmscript": "import os"}, headers=auth)
        assert r.status_code == 400 and "import os" in r.json()["detail"]
        models = c.get("/v1/models", headers=auth).json()["models"]
        assert {m["model_id"] for m in models} == {"tiny-host", "broken"}
        assert "/v1/schedules" in c.get("/openapi.json", headers=auth).json()["paths"]
    finally:
        # SIGTERM, as `kill` sends: a background job (CI's, nohup's) inherits SIGINT ignored
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        log.close()
    assert rc == 0, (tmp_path / "serve.log").read_text()[-3000:]
    time.sleep(1)
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/healthz", timeout=2)
    leftover = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert not leftover, f"processes left behind by tlm serve: {leftover}"

