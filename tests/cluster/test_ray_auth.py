"""Ray's token authentication, configured deliberately: a Ray the project starts (``connect``)
requires the cluster's token, with no warning about a default, and works — also when Ray was
imported before the mode was set (Ray reads it at import: the first try failed to connect)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import subprocess_env

pytestmark = pytest.mark.slow  # a Ray start


def test_a_local_ray_of_ours_uses_token_authentication(tmp_path):
    code = """
import ray  # imported first, as `tlm serve` does (ray.serve before connect)
import os
from cluster.ray_session import connect
assert connect(None)
print("mode", os.environ["RAY_AUTH_MODE"])
print("answer", ray.get(ray.remote(lambda: 41 + 1).remote()))
ray.shutdown()
"""
    env = subprocess_env(RAY_USAGE_STATS_ENABLED="0", HOME=str(tmp_path))  # a fresh home: Ray makes the token
    env.pop("RAY_AUTH_MODE", None)
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    out = got.stdout + got.stderr
    assert got.returncode == 0, out[-3000:]
    assert "mode token" in out and "answer 42" in out
    assert "Token authentication is enabled for this Ray cluster" not in out  # Ray's warning about its default
    assert os.path.getsize(tmp_path / ".ray" / "auth_token") > 0
