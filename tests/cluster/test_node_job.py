"""Work run on a node of one hardware key through a collection actor (``cluster.node_job``): the
key must be in the cluster, the work is a run of the corpus closed with its outcome, the node's
own error comes back as itself, and the device's measurement slot is free again afterwards."""
from __future__ import annotations

import time

import pytest

from cluster.node_job import NodeJob, NoNodeOfKey, run_on_node
from tests.cluster.conftest import KEY_A, KEY_B

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_key_no_node_advertises_is_refused_naming_the_keys_the_cluster_has(ray_cluster, tmp_path):
    with pytest.raises(NoNodeOfKey, match=f"'cpu-absent-1c'.*it has .*{KEY_A}, {KEY_B}"):
        run_on_node(NodeJob(str(tmp_path), hardware_key="cpu-absent-1c"), "probe", getattr, "key")
    with pytest.raises(NoNodeOfKey, match="name one with --hardware"):  # several keys, none named
        run_on_node(NodeJob(str(tmp_path)), "probe", getattr, "key")


def test_work_runs_with_the_nodes_hardware_as_a_run_of_the_corpus_and_frees_the_slot(ray_cluster, tmp_path):
    import ray

    from cluster.resources import measure_resource
    from storage import Corpus

    hw = ray_cluster.hardware[KEY_A]
    announced = []
    result, where = run_on_node(NodeJob(str(tmp_path), hardware_key=KEY_A), "probe", getattr, "key",
                                params={"why": "test"}, hardware=hw, announce=announced.append)
    assert result == KEY_A and where["hardware_key"] == KEY_A and announced == [where]
    assert where["node_id"] in ray_cluster.node_ids[KEY_A]
    # the node's own error is raised as itself, and its run says it failed
    with pytest.raises(AttributeError, match="no_such_attribute"):
        run_on_node(NodeJob(str(tmp_path), hardware_key=KEY_A), "probe", getattr, "no_such_attribute", hardware=hw)
    with Corpus.open(str(tmp_path)) as corpus:
        runs = [(r["kind"], r["status"], r["params"]) for r in corpus.runs()]
    assert runs == [("probe", "done", {"hardware": KEY_A, "why": "test"}), ("probe", "failed", {"hardware": KEY_A})]
    slot = measure_resource(KEY_A)
    for _ in range(50):  # the actor is killed: its measurement slot comes back for the collectors
        if ray.available_resources().get(slot) == 1:
            break
        time.sleep(0.1)
    assert ray.available_resources().get(slot) == 1


def test_a_job_waits_while_a_collector_holds_the_keys_only_slot_and_runs_once_it_is_free(ray_cluster, tmp_path):
    """Never beside another measurement: the job's actor takes the same ``measure:<key>`` slot a
    collection's collector holds, so it starts only when that collector is gone."""
    import threading

    import ray

    from cluster.dispatcher import make_collector

    hw = ray_cluster.hardware[KEY_B]
    holder = make_collector(KEY_B, str(tmp_path), None, "a-collection", hw)
    ray.get(holder.where.remote(), timeout=60)
    got: dict = {}
    th = threading.Thread(target=lambda: got.update(r=run_on_node(NodeJob(str(tmp_path), hardware_key=KEY_B),
                                                                   "probe", getattr, "key", hardware=hw)))
    th.start()
    time.sleep(3.0)
    assert th.is_alive() and not got, "the job ran beside the collector holding the slot"
    ray.kill(holder)
    th.join(timeout=120)
    assert got["r"][0] == KEY_B
