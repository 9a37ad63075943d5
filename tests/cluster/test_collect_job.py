"""The collection job on a simulated heterogeneous Ray cluster (tests/cluster/conftest.py).

Real tuning of tiny matmuls with a few trials: every record here was built and measured.
"""
from __future__ import annotations

import logging
import threading
import time

import pyarrow.compute as pc
import pytest

from cluster.collect_job import JobConfig, run_collection
from cluster.dispatcher import make_collector
from tests.helpers import subprocess_env
from tests.helpers.records import unit_keys

# The simulated cluster's hardware keys (tests/cluster/conftest.py).
KEY_A, KEY_B, KEY_C, KEY_D = "cpu-sim_a-1c", "cpu-sim_b-1c", "cpu-sim_c-1c", "cpu-sim_d-1c"
KEY_GPU = "cuda-sm_90-fake"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a simulated Ray cluster: ~30 s a test


def _task(n: int, m: int, k: int):
    from collectors.tasks import Task
    from tests.helpers.workloads import matmul
    from collectors.tir import workload_key

    mod = matmul(n, m, k)
    return Task(workload_key(mod), f"matmul_{n}x{m}x{k}", mod, flops=2.0 * n * m * k, op_kind="matmul", model="tiny")


TASKS = [(16, 16, 16), (16, 32, 16), (32, 16, 16), (16, 16, 32)]


def _tune_config(trials: int = 4, per_iter: int = 2):
    from collectors.tuner import TuneConfig

    return TuneConfig(trials=trials, trials_per_iter=per_iter, strategy="replay-trace", builder_workers=1,
                      number=1, repeat=2, min_repeat_ms=5)


def _job(**kw) -> JobConfig:
    return JobConfig(progress=False, **kw)


def _scan(root):
    from storage import Corpus

    with Corpus.open(root) as corpus:
        return corpus.scan()


def test_placement_follows_hardware_and_ends_promptly_for_missing_keys(ray_cluster, tmp_path, caplog):
    tasks = [_task(*s) for s in TASKS[:2]]
    caplog.set_level(logging.INFO, logger="cluster.collect_job")
    t0 = time.time()
    s = run_collection(
        tasks, corpus_root=str(tmp_path), tune_config=_tune_config(), hardware=ray_cluster.hardware,
        hardware_keys=[KEY_A, KEY_B, "cpu-absent-1c"], config=_job(),
    )
    assert s.status == "partial" and s.missing_keys == ["cpu-absent-1c"]
    assert KEY_GPU in s.idle_keys and any(KEY_GPU in r.message and "idle" in r.message for r in caplog.records)
    by = {(o.workload_key, o.hardware_key): o for o in s.outcomes}
    for t in tasks:
        for key in (KEY_A, KEY_B):
            o = by[(t.workload_key, key)]
            assert o.status == "done", o
            assert o.node_id in ray_cluster.node_ids[key], f"{key} tuned on the wrong node"
            assert o.records + o.duplicates == 4 and o.records >= 1 and o.attempts == 1
        assert by[(t.workload_key, "cpu-absent-1c")].status == "unplaceable"
    assert time.time() - t0 < 300

    table = _scan(tmp_path)
    assert table.num_rows == s.records >= 8
    assert len(set(table["record_id"].to_pylist())) == table.num_rows
    assert set(table["run_id"].to_pylist()) == {s.run_id}
    ok = pc.is_valid(table["latency_s"])
    assert pc.sum(ok).as_py() >= 1, "at least one candidate measured"

    # At most one measurement per measure: slot at a time: each key has one slot here, so the
    # tasks of a key ran one after another, and each record was measured inside its task's span.
    for key in (KEY_A, KEY_B):
        spans = sorted((o.started_at, o.finished_at, o.workload_key) for o in s.outcomes
                       if o.hardware_key == key and o.status == "done")
        for (s0, e0, _), (s1, e1, _) in zip(spans, spans[1:]):
            assert e0 <= s1, f"two tasks measured on {key} at once"
        for start, end, wk in spans:
            rows = table.filter(pc.and_(pc.equal(table["hardware_key"], key), pc.equal(table["workload_key"], wk)))
            ts = [t.timestamp() for t in rows["created_at"].to_pylist()]
            assert ts and all(start - 0.5 <= x <= end + 0.5 for x in ts)

    # The run is in the index, with its tasks (`tlm runs` reads the same).
    from storage import Corpus

    (row,) = [r for r in Corpus.open(tmp_path).run_summaries() if r["run_id"] == s.run_id]
    assert (row["status"], row["tasks_done"], row["tasks_failed"]) == ("partial", 4, 2)
    assert row["records"] == sum(o.records + o.duplicates for o in s.outcomes)


def test_a_measure_slot_admits_one_collector(ray_cluster, tmp_path):
    """A second collector for a one-slot key waits: Ray will not place it while the first lives."""
    import ray

    first = make_collector(KEY_A, str(tmp_path), None, "r", ray_cluster.hardware[KEY_A])
    where = ray.get(first.where.remote(), timeout=60)
    assert where["node_id"] in ray_cluster.node_ids[KEY_A]
    # Measurements use the key's cores, not the one thread Ray's OMP_NUM_THREADS=1 would give.
    assert where["tvm_num_threads"] == str(ray_cluster.hardware[KEY_A].cores)
    second = make_collector(KEY_A, str(tmp_path), None, "r", ray_cluster.hardware[KEY_A])
    ready, _ = ray.wait([second.where.remote()], timeout=3)
    assert not ready
    ray.kill(first)
    assert ray.get(second.where.remote(), timeout=60)["node_id"] in ray_cluster.node_ids[KEY_A]
    ray.kill(second)


def test_gpu_collector_lands_on_the_gpu_node_with_one_device(ray_cluster, tmp_path):
    import ray

    actor = make_collector(KEY_GPU, str(tmp_path), None, "r", ray_cluster.hardware[KEY_GPU])
    where = ray.get(actor.where.remote(), timeout=60)
    ray.kill(actor)
    assert where["node_id"] in ray_cluster.node_ids[KEY_GPU]
    assert where["cuda_visible_devices"] == "0"


def test_restarted_driver_resumes_from_the_index(ray_cluster, tmp_path):
    tasks = [_task(*s) for s in TASKS[:2]]
    first = run_collection(tasks[:1], corpus_root=str(tmp_path), tune_config=_tune_config(),
                           hardware=ray_cluster.hardware, hardware_keys=[KEY_A], config=_job())
    assert first.status == "done" and first.count("done") == 1
    rows = _scan(tmp_path).num_rows
    again = run_collection(tasks, corpus_root=str(tmp_path), tune_config=_tune_config(),
                           hardware=ray_cluster.hardware, hardware_keys=[KEY_A], config=_job())
    by = {o.workload_key: o for o in again.outcomes}
    assert by[tasks[0].workload_key].status == "skipped" and by[tasks[0].workload_key].attempts == 0
    assert by[tasks[1].workload_key].status == "done"
    table = _scan(tmp_path)
    assert table.num_rows == rows + by[tasks[1].workload_key].records
    assert len(set(table["record_id"].to_pylist())) == table.num_rows


def _start_job_and_await_first_part(ray_cluster, tmp_path, tasks, key, job):
    """Run a 4-trial collection for ``key`` in a thread; return once its first part is in the
    index (or after 240 s): a part file is renamed into place a moment before the index lists
    it, and a node killed in that moment leaves an orphan part and no record (the index is the
    truth; ``tlm corpus reindex`` adopts it). Returns the thread and the dict its summary lands
    in (under "s")."""
    result: dict = {}

    def drive():
        result["s"] = run_collection(tasks, corpus_root=str(tmp_path), tune_config=_tune_config(trials=4),
                                     hardware=ray_cluster.hardware, hardware_keys=[key], config=job)

    th = threading.Thread(target=drive)
    th.start()
    parts = tmp_path / f"hardware={key}"
    deadline = time.time() + 240
    while time.time() < deadline and not (parts.exists() and any(parts.glob("*.parquet")) and _scan(tmp_path).num_rows):
        time.sleep(0.2)
    return th, result


def test_node_death_mid_job_retries_elsewhere_without_duplicates(ray_cluster, tmp_path):
    """Two nodes of one hardware; one is killed while tasks run: the job still completes."""
    nodes = [ray_cluster.add_cpu_node(KEY_C), ray_cluster.add_cpu_node(KEY_C)]
    tasks = [_task(*s) for s in TASKS[:3]]
    # Wait for the first flushed batch (a task is mid-way), then kill one of the two nodes.
    th, result = _start_job_and_await_first_part(ray_cluster, tmp_path, tasks, KEY_C, _job(lost_key_grace_s=5))
    assert (tmp_path / f"hardware={KEY_C}").exists(), "no records were written"
    victim = nodes[0]
    ray_cluster.cluster.remove_node(victim)
    th.join(timeout=480)
    assert not th.is_alive()
    ray_cluster.cluster.remove_node(nodes[1])  # free its memory for the next tests
    s = result["s"]
    assert s.status == "done", [(o.task_name, o.status, o.error) for o in s.outcomes]
    assert all(o.status == "done" for o in s.outcomes)
    assert sum(o.attempts for o in s.outcomes) > len(tasks), "the killed task was retried"
    retried = [o for o in s.outcomes if o.attempts > 1]
    assert all(o.node_id == nodes[1].node_id for o in retried)

    table = _scan(tmp_path)
    ids = table["record_id"].to_pylist()
    assert len(ids) == len(set(ids)), "a record was stored twice"
    for o in s.outcomes:  # nothing lost: each task's stored records cover its final attempt
        got = table.filter(pc.equal(table["workload_key"], o.workload_key)).num_rows
        assert got >= max(o.records, 1)


def test_tlm_collect_options_drive_a_cluster_job(ray_cluster, tmp_path, index_url, capsys):
    """The `tlm collect` options plus the cluster flags run a model's task on the cluster.

    Uses the PostgreSQL index when TLM_TEST_PG_URL is set (several collectors, one index).
    """
    import argparse
    import json

    from cluster.cli.collect import add_cluster_arguments, add_collect_arguments, run_on_ray
    from storage import Corpus

    p = argparse.ArgumentParser()
    add_collect_arguments(p)
    add_cluster_arguments(p)
    argv = ["--model", "gpt2", "--small", "--tasks", "1", "--trials", "2", "--trials-per-iter", "2",
            "--strategy", "replay-trace", "--corpus", str(tmp_path), "--hardware", KEY_B,
            "--address", ray_cluster.cluster.address, "--no-progress"]
    if index_url:
        argv += ["--index-url", index_url]
    assert run_on_ray(p.parse_args(argv), hardware=ray_cluster.hardware) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["status"], summary["done"], summary["failed"]) == ("done", 1, 0)
    corpus = Corpus.open(tmp_path, index_url=index_url)
    table = corpus.scan()
    assert table.num_rows == summary["records"] >= 1
    assert set(table["hardware_key"].to_pylist()) == {KEY_B}
    (run,) = corpus.run_summaries()
    assert run["status"] == "done" and run["tasks_done"] == 1
    assert corpus.workload(table["workload_key"][0].as_py())["task_name"]


def test_tasks_of_a_vanished_hardware_are_reported_not_waited_on(ray_cluster, tmp_path):
    """The only node of a key dies mid-job: its tasks fail after the grace period; the job ends."""
    key = KEY_D
    node = ray_cluster.add_cpu_node(key)
    tasks = [_task(*s) for s in TASKS[:3]]
    th, result = _start_job_and_await_first_part(ray_cluster, tmp_path, tasks, key,
                                                 _job(lost_key_grace_s=3, max_attempts=2))
    ray_cluster.cluster.remove_node(node)
    th.join(timeout=180)
    assert not th.is_alive(), "the job waited forever for a hardware that is gone"
    s = result["s"]
    assert s.status == "partial"
    failed = [o for o in s.outcomes if o.status == "failed"]
    assert failed and all("no node" in o.error or "died" in o.error for o in failed)
    ids = _scan(tmp_path)["record_id"].to_pylist()
    assert ids and len(ids) == len(set(ids)), "records flushed before the death are kept, once"


def test_without_an_address_a_local_ray_is_started(tmp_path):
    """The embedded default: a fresh process, no cluster given, this machine's own hardware."""
    import json
    import subprocess
    import sys

    code = f"""
import json
from collectors.hardware import detect_hardware
from collectors.tasks import Task
from collectors.tuner import TuneConfig
from tests.helpers.workloads import matmul
from cluster.collect_job import JobConfig, run_collection
from collectors.tir import workload_key
mod = matmul(16, 16, 16)
task = Task(workload_key(mod), "matmul_16", mod, flops=8192.0, op_kind="matmul")
cfg = TuneConfig(trials=2, trials_per_iter=2, strategy="replay-trace", number=1, repeat=1, min_repeat_ms=5)
s = run_collection([task], corpus_root={str(tmp_path)!r}, tune_config=cfg,
                   config=JobConfig(progress=False, object_store_mb=80))
print("RESULT", json.dumps({{**s.as_dict(), "key": detect_hardware("cpu").key}}))
"""
    env = subprocess_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and line, out.stderr[-3000:]
    r = json.loads(line[0][len("RESULT "):])
    assert (r["status"], r["done"]) == ("done", 1)
    assert _scan(tmp_path)["hardware_key"].unique().to_pylist() == [r["key"]]


def test_a_node_that_joins_while_the_job_waits_for_its_hardware_is_used(ray_cluster, tmp_path):
    """--wait-for-nodes: an absent key is requested and waited for, not reported at once."""
    from collectors.hardware import cpu_hardware

    key = "cpu-sim_e-1c"
    ray_cluster.hardware[key] = cpu_hardware(cores=1, key=key)
    result: dict = {}

    def drive():
        result["s"] = run_collection([_task(*TASKS[0])], corpus_root=str(tmp_path),
                                     tune_config=_tune_config(trials=2), hardware=ray_cluster.hardware,
                                     hardware_keys=[key], config=_job(wait_for_nodes_s=120))

    th = threading.Thread(target=drive)
    th.start()
    time.sleep(3.0)
    assert th.is_alive(), "the job did not wait for the absent hardware"
    node = ray_cluster.add_cpu_node(key)  # Cluster.add_node must run in the main thread
    try:
        th.join(timeout=240)
    finally:
        ray_cluster.cluster.remove_node(node)
    s = result["s"]
    assert s.status == "done" and s.missing_keys == []
    assert s.outcomes[0].node_id == node.node_id


def test_sigterm_stops_a_local_job_as_an_interrupt_and_leaves_no_unit_running(tmp_path):
    """`kill` of a background collection (shells give background jobs no SIGINT) is a stop like
    Ctrl-C: exit 130, run "interrupted", no unit left "running" (it was "failed" and "running")."""
    import signal
    import subprocess
    import sys
    import time

    from storage import Corpus

    code = f"""
import sys
from collectors.tasks import Task
from collectors.tuner import TuneConfig
from tests.helpers.workloads import matmul
from cluster.collect_job import JobConfig, run_collection
from collectors.tir import workload_key
tasks = [Task(workload_key(m), f"matmul_{{n}}", m, flops=2.0 * n ** 3, op_kind="matmul")
         for n, m in ((n, matmul(n, n, n)) for n in (16, 24, 32, 40))]
cfg = TuneConfig(trials=64, trials_per_iter=2, strategy="replay-trace", number=1, repeat=1, min_repeat_ms=5)
try:
    run_collection(tasks, corpus_root={str(tmp_path)!r}, tune_config=cfg, config=JobConfig(progress=False, object_store_mb=80))
except KeyboardInterrupt:
    sys.exit(130)
"""
    env = subprocess_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not list(tmp_path.glob("hardware=*/part-*.parquet")):
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    with Corpus.open(tmp_path) as c:
        (run,) = c.runs()
        assert run["status"] == "interrupted"
        statuses = {c.task_status(t, h, "replay-trace", 64) for t, h in unit_keys(c)}
        assert "running" not in statuses and "interrupted" in statuses, statuses


# ---------------------------------------------------------------------------------------------
# Ray-mode faults (marked ``faults``: rows of bench/results/reliability.json's fault table)

def _node_processes(node, marker: str) -> list:
    """Live processes of a simulated node (its raylet's descendants) whose command line holds ``marker``."""
    import psutil

    raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
    found = []
    for p in raylet.children(recursive=True):
        try:
            if marker in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:  # it ended while we looked
            pass
    return found


def _fault_job(ray_cluster, tmp_path, key: str, kill) -> tuple:
    """A 3-task, 4-trial job on a fresh 1-CPU node of ``key``; ``kill(node)`` once its first part
    is on disk. Returns (summary, table, what kill returned, lost, duplicated): lost counts the
    records each task's final attempt reported stored that cannot be read back."""
    from collectors.hardware import cpu_hardware

    ray_cluster.hardware[key] = cpu_hardware(cores=1, key=key)
    node = ray_cluster.add_cpu_node(key)
    tasks = [_task(*s) for s in TASKS[:3]]
    try:
        th, result = _start_job_and_await_first_part(ray_cluster, tmp_path, tasks, key, _job(lost_key_grace_s=5))
        assert (tmp_path / f"hardware={key}").exists(), "no records were written"
        killed = kill(node)
        th.join(timeout=480)
        assert not th.is_alive()
    finally:
        ray_cluster.cluster.remove_node(node)
    table = _scan(tmp_path)
    ids = table["record_id"].to_pylist()
    lost = sum(max(0, o.records - table.filter(pc.equal(table["workload_key"], o.workload_key)).num_rows)
               for o in result["s"].outcomes)
    return result["s"], table, killed, lost, len(ids) - len(set(ids))


@pytest.mark.faults
def test_a_collector_actor_sigkilled_mid_job_is_replaced_and_its_unit_retried(ray_cluster, tmp_path, fault_row):
    import signal

    def kill(node):
        (actor,) = _node_processes(node, "ray::Collector")
        actor.send_signal(signal.SIGKILL)
        return actor.pid

    s, table, _, lost, dup = _fault_job(ray_cluster, tmp_path, "cpu-sim_f-1c", kill)
    assert s.status == "done", [(o.task_name, o.status, o.error) for o in s.outcomes]
    assert sum(o.attempts for o in s.outcomes) > len(s.outcomes), "the killed unit was retried"
    assert lost == 0 and dup == 0
    assert table.num_rows >= sum(o.records for o in s.outcomes)
    fault_row("SIGKILL collector actor (Ray mode)", "mid-job, after its first part was written",
              f"the unit was retried on a new actor; job done, {table.num_rows} records", lost, dup)


@pytest.mark.faults
def test_a_measuring_worker_sigkilled_mid_job_costs_one_candidate_at_most(ray_cluster, tmp_path, fault_row):
    """The build and measure workers (TVM popen workers under the collector actor) die: the job
    goes on with new ones; a candidate in flight is stored as an error, never as a latency."""
    import signal

    import psutil

    def command(p) -> str:
        try:
            return " ".join(p.cmdline())
        except psutil.Error:  # it ended while we looked (a fresh clone's run failed on one so)
            return ""

    def kill(node):
        (actor,) = _node_processes(node, "ray::Collector")
        workers = [p for p in actor.children(recursive=True) if "popen_worker" in command(p)]
        assert workers, "the collector has no build or measure worker"
        for w in workers:
            w.send_signal(signal.SIGKILL)
        return len(workers)

    s, table, killed, lost, dup = _fault_job(ray_cluster, tmp_path, "cpu-sim_g-1c", kill)
    assert s.status == "done", [(o.task_name, o.status, o.error) for o in s.outcomes]
    assert [o.attempts for o in s.outcomes] == [1, 1, 1], "a dead worker is replaced, not a reason to retry"
    assert table.num_rows == 3 * 4 and lost == 0 and dup == 0, "every candidate has its record"
    errors = [e for e in table["error"].to_pylist() if e]
    assert len(errors) <= killed, errors
    fault_row("SIGKILL build + measure workers (Ray mode)", f"mid-job: the {killed} TVM popen workers under the "
              "collector actor", f"job done on new workers; {table.num_rows} records, {len(errors)} of them errors "
              f"({'; '.join(sorted({' '.join(e.split())[:60] for e in errors})) or 'none'})", lost, dup)
