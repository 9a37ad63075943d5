"""The driver of a Ray-mode collection SIGKILLed mid-job, then run again.

``tlm collect`` without ``--no-ray`` starts a local Ray of its own (``address="local"``) and
drives collector actors; the driver is the one process that knows the job. Killed with SIGKILL
(no handler runs: no "interrupted" is written, no actor is told), the Ray processes it started
must not outlive it, and the same command run again must finish the job from the index: every
record on disk before the kill still readable, none stored twice, the corpus checking clean.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from storage import Corpus
from tests.faults.conftest import audit
from tests.helpers import subprocess_env
from tests.helpers.records import unit_keys

ROOT = Path(__file__).resolve().parents[2]


def _collect(root: Path) -> subprocess.Popen:
    """``tlm collect`` in Ray mode: 3 BERT (small) tasks, 8 random programs each, one part per task."""
    cmd = [sys.executable, "-m", "cluster.cli", "collect", "--model", "bert_base", "--small", "--tasks", "3",
           "--trials", "8", "--strategy", "replay-trace", "--corpus", str(root), "--no-progress"]
    return subprocess.Popen(cmd, env=subprocess_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _ids_on_disk(root: Path) -> set[str]:
    import pyarrow.parquet as pq

    return {i for p in root.glob("hardware=*/*.parquet") for i in pq.read_table(p, columns=["record_id"])
            ["record_id"].to_pylist()}


@pytest.mark.slow
def test_a_driver_sigkilled_mid_job_leaves_no_ray_behind_and_a_rerun_finishes(tmp_path, fault_row):
    root = tmp_path / "corpus"
    proc = _collect(root)
    tree = psutil.Process(proc.pid)
    ray_procs: list[psutil.Process] = []
    again = None
    try:
        deadline = time.time() + 420
        while time.time() < deadline and not list(root.glob("hardware=*/part-*.parquet")):
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.2)
        assert list(root.glob("hardware=*/part-*.parquet")), "no part within 420 s"
        ray_procs = tree.children(recursive=True)  # raylet, GCS, agents, workers, the collector actor
        stored = _ids_on_disk(root)
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        # the raylet, GCS and workers end with the driver at once; Ray's two agents notice their
        # raylet is gone within 2 s but first try to tell the dead GCS why (about a minute):
        # they are awaited while the same command runs again
        _, alive = psutil.wait_procs(ray_procs, timeout=30)
        core = sorted({p.name() for p in alive if p.is_running() and "Agent" not in p.name()})
        assert not core, f"the killed driver's Ray processes outlived it by 30 s: {core}"
        again = _collect(root)
        out, _ = again.communicate(timeout=600)
        assert again.returncode == 0, out[-3000:]
        _, alive = psutil.wait_procs(alive, timeout=max(1.0, killed_at + 180 - time.time()))
        lingering = sorted({p.name() for p in alive if p.is_running()})
        assert not lingering, f"the killed driver's Ray processes outlived it by 180 s: {lingering}"
        ended_s = time.time() - killed_at
    finally:  # whatever failed, leave nothing of either run behind
        for p in [tree, *ray_procs, *_children(tree), *(_children(psutil.Process(again.pid)) if again
                                                        and again.poll() is None else [])]:
            _kill(p)

    with Corpus.open(root) as corpus:
        lost, dup = audit(corpus, stored)
        units = [corpus.task_status(w, h, "replay-trace", 8) for w, h in unit_keys(corpus)]
        n = corpus.stats()["records"]
        runs = [r["status"] for r in corpus.runs()]
    assert (lost, dup) == (0, 0) and units == ["done"] * 3, units
    assert runs == ["interrupted", "done"], "the killed driver's run is marked interrupted by the rerun, not left running"
    fault_row("SIGKILL driver (Ray mode)", "tlm collect, after its first part was written; then the same "
              "command again", f"the {len(ray_procs)} Ray processes it started all gone {ended_s:.0f} s "
              f"after the kill (checked after the rerun); the rerun finished the 3 units: {n} records, the "
              f"{len(stored)} stored before the kill among them", lost, dup)


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def _kill(p: psutil.Process) -> None:
    try:
        p.kill()
    except psutil.Error:
        pass
