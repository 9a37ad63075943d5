"""Never measure beside a busy core (issue 32, item 0): every measured candidate carries the
load other processes put on the host while it was timed; beside a busy core it is measured
again or stored as an error, never as a latency; a judge refuses to run beside another
measuring job. The busy core is a real busy loop pinned to the other core.

The suite runs with ``TLM_BUSY_HOST=record`` (its two workers measure side by side); these
tests set the policy they test."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from collectors.host_load import (BusyHost, LoadMeter, QuietHost, measuring_job, other_measuring_jobs,
                                  refuse_beside_measuring)

BUSY_LOOP = "import os\nos.sched_setaffinity(0, {%d})\nwhile True: pass\n"


@pytest.fixture
def busy_core():
    """A process spinning on the last core (the 'other' core of a 2-core machine)."""
    core = max(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP % core])
    time.sleep(0.3)  # let it start spinning
    yield proc
    proc.kill()
    proc.wait()


def test_load_meter_sees_a_busy_core(busy_core):
    meter = LoadMeter()
    time.sleep(0.5)
    assert meter.other_cores() >= 0.8


def test_policy_from_env(monkeypatch):
    monkeypatch.setenv("TLM_BUSY_HOST", "record")
    assert not QuietHost.from_env().act and not QuietHost.from_env().busy(2.0)
    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    monkeypatch.setenv("TLM_BUSY_WAIT_S", "7")
    policy = QuietHost.from_env()
    assert policy.act and policy.wait_s == 7 and policy.busy(1.0) and not policy.busy(0.1) and not policy.busy(None)
    monkeypatch.setenv("TLM_BUSY_HOST", "sometimes")
    with pytest.raises(ValueError, match="TLM_BUSY_HOST='sometimes'"):
        QuietHost.from_env()


def _mm_task():
    from tests.helpers.workloads import make_task, matmul

    return make_task(matmul(64, 64, 64), "mm", "matmul")


def _measure(task, hw, n: int = 1):
    from collectors.judge import rules_method
    from collectors.tuner import measure_schedules

    records: list = []
    measure_schedules(task, hw, rules_method(task, hw).schedules[:n], tuner="test", on_records=records.extend)
    return records


@pytest.mark.slow
def test_a_candidate_timed_beside_a_busy_core_is_an_error_with_its_load(cpu_hw, busy_core, monkeypatch):
    """Measured, redone after the wait, still busy: stored as 'busy host', never as a latency."""
    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    monkeypatch.setenv("TLM_BUSY_WAIT_S", "0.5")
    (rec,) = _measure(_mm_task(), cpu_hw)
    assert rec.latency_s is None and rec.run_secs == []
    assert rec.error.startswith("run error: busy host: other processes kept"), rec.error
    assert "measured 3 times" in rec.error
    assert rec.host_load >= 0.6


@pytest.mark.slow
def test_recording_only_keeps_the_latency_and_says_how_busy(cpu_hw, busy_core, monkeypatch):
    monkeypatch.setenv("TLM_BUSY_HOST", "record")
    (rec,) = _measure(_mm_task(), cpu_hw)
    assert rec.error is None and rec.latency_s > 0
    assert rec.host_load >= 0.6


def test_pytorch_eager_timed_beside_a_busy_core_is_an_error_not_a_latency(cpu_hw, busy_core, monkeypatch):
    """A judge's eager figure follows the schedules' rule (it once read 6.7x slow beside a build)."""
    from collectors.judge import time_torch_equivalent

    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    monkeypatch.setenv("TLM_BUSY_WAIT_S", "0.2")
    eager = time_torch_equivalent(_mm_task(), cpu_hw)
    assert eager["latency_s"] is None and eager["n_errors"] == 1
    assert eager["errors"][0].startswith("busy host: other processes kept") and eager["host_load"] >= 0.6


def test_a_timing_in_process_is_kept_on_a_quiet_host_and_redone_beside_a_busy_one():
    from collectors.host_load import time_on_quiet_host

    calls = []
    value, load, err = time_on_quiet_host(lambda: calls.append(1) or 0.5, QuietHost(max_other_cores=1e9))
    assert (value, err, len(calls)) == (0.5, None, 1)
    starved = QuietHost(min_own_cores=1e9, redo=1, wait_s=0.0)  # every timing reads as starved
    value, load, err = time_on_quiet_host(lambda: calls.append(1) or 0.5, starved)
    assert value is None and "measured 2 times" in err and len(calls) == 3


@pytest.mark.timing
def test_a_busy_candidate_is_measured_again_once_the_host_is_quiet(cpu_hw, monkeypatch):
    """The busy loop stops while the runner waits: the redo's latency is kept, with its low load.
    (A quiet machine only: ``--timing -n 0``.)"""
    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    monkeypatch.setenv("TLM_BUSY_WAIT_S", "30")
    core = max(os.sched_getaffinity(0))
    loop = subprocess.Popen([sys.executable, "-c", BUSY_LOOP % core])
    killer = subprocess.Popen([sys.executable, "-c", f"import os, signal, time; time.sleep(3); os.kill({loop.pid}, signal.SIGKILL)"])
    try:
        time.sleep(0.3)
        (rec,) = _measure(_mm_task(), cpu_hw)
    finally:
        loop.kill()
        killer.wait()
    assert rec.error is None and rec.latency_s > 0
    assert rec.host_load < 0.5


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A registry of measuring jobs of this test's own (its temp dir: children inherit TMPDIR), so
    the other xdist worker's measurements, or a campaign running beside the suite, are not in it."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _registered_child(tmp_path):
    """A process that registers itself as measuring and sleeps."""
    ready = tmp_path / "ready"
    code = ("import sys, time\nfrom collectors.host_load import measuring_job\n"
            "with measuring_job('tuning conv2d (evolutionary, 64 trials)'):\n"
            f"    open({str(ready)!r}, 'w').close()\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def test_a_judge_refuses_to_run_beside_another_measuring_job(registry, tmp_path, monkeypatch):
    """Listed while it runs, not while it is stopped (SIGSTOP), gone once it is dead."""
    import signal

    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    proc = _registered_child(tmp_path)
    try:
        assert proc.pid in [j["pid"] for j in other_measuring_jobs()]
        with pytest.raises(BusyHost, match=rf"pid {proc.pid}: tuning conv2d .*TLM_BUSY_HOST=record"):
            refuse_beside_measuring("judge")
        monkeypatch.setenv("TLM_BUSY_HOST", "record")
        refuse_beside_measuring("judge")  # recording only: measure anyway
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.1)
        assert proc.pid not in [j["pid"] for j in other_measuring_jobs()]
        os.kill(proc.pid, signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in [j["pid"] for j in other_measuring_jobs()]


def test_own_job_is_not_another(registry, monkeypatch):
    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    with measuring_job("outer"), measuring_job("inner"):
        assert os.getpid() not in [j["pid"] for j in other_measuring_jobs()]
        refuse_beside_measuring("judge")


def test_a_benchmark_exits_2_beside_a_measuring_job(registry, tmp_path, monkeypatch, capsys):
    from bench import references

    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    proc = _registered_child(tmp_path)
    try:
        with pytest.raises(SystemExit) as exc:
            references.main(["--tasks", "1"])
    finally:
        proc.kill()
        proc.wait()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: will not search the references") and str(proc.pid) in err


def test_the_demo_says_in_one_line_that_another_job_measures(registry, tmp_path, monkeypatch, capsys):
    from cluster.cli import main

    monkeypatch.setenv("TLM_BUSY_HOST", "redo")
    proc = _registered_child(tmp_path)
    try:
        rc = main(["demo", "--quick"])
    finally:
        proc.kill()
        proc.wait()
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: will not run the demo while another job measures") and "kill -STOP" in err


def test_a_measuring_process_stopped_while_timing_shows_in_its_own_share(tmp_path):
    """SIGSTOP inside a timed window: the window's wall time includes the stop and nobody else
    was busy, so only the process's own CPU share shows it; the policy then keeps no latency."""
    import signal

    from collectors.host_load import QuietHost, busy_error

    out, ready = tmp_path / "own", tmp_path / "ready"
    code = ("import time\nfrom collectors.host_load import LoadMeter\nm = LoadMeter()\nt = time.perf_counter()\n"
            f"open({str(ready)!r}, 'w').close()\n"
            "while time.perf_counter() - t < 2.0: pass\n"
            f"open({str(out)!r}, 'w').write(str(m.own_cores()))\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not ready.exists():  # its meter runs (a loaded machine starts Python slowly)
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGSTOP)
    time.sleep(3.0)
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=30) == 0
    own = float(out.read_text())
    assert own < 0.5, own  # ran at most 2 s of a window of over 3
    policy = QuietHost(redo=0)
    assert policy.busy(0.0, own) and not policy.busy(0.0, 1.5)
    assert "the measuring process ran on" in busy_error(0.0, own, policy)
