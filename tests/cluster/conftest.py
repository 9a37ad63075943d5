"""One simulated heterogeneous Ray cluster for every Ray test in tests/cluster.

Nodes (all on this machine, ``ray.cluster_utils.Cluster``; docs/STACK.md):
- head: no CPUs and no hardware resources, so no collector is ever placed on it;
- node A: CPU hardware ``KEY_A`` (1 measure slot), node B: CPU hardware ``KEY_B``;
- node G: one fake GPU with ``KEY_GPU`` (placement only: nothing is measured on it).
Keys A and B describe the same physical CPU with 1 core each; they differ only by name, which
is enough to check that placement follows the resources.

The cluster is started once for a run of this directory's tests (one ``ray.init`` per pytest
process at a time) and shut down as soon as a test of another directory (or none) comes next, so
other areas' Ray fixtures start from a clean slate; a later test of this directory starts it again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
KEY_A = "cpu-sim_a-1c"
KEY_B = "cpu-sim_b-1c"
KEY_C = "cpu-sim_c-1c"  # added by the fault test: two nodes of the same hardware
KEY_D = "cpu-sim_d-1c"  # added by the lost-hardware test: its only node dies
KEY_GPU = "cuda-sm_90-fake"
NODE_OBJECT_STORE = 80 * 1024 * 1024

_state: dict = {}


@dataclass
class SimCluster:
    cluster: object  # ray.cluster_utils.Cluster
    hardware: dict  # key -> Hardware given to run_collection
    node_ids: dict = field(default_factory=dict)  # key -> list of Ray node ids

    def add_cpu_node(self, key: str):
        """Add a 1-CPU node advertising ``key``; returns the Ray node."""
        from cluster.resources import node_resources

        node = self.cluster.add_node(
            num_cpus=1, resources=node_resources(self.hardware[key]), object_store_memory=NODE_OBJECT_STORE
        )
        self.node_ids.setdefault(key, []).append(node.node_id)
        return node


def sim_hardware() -> dict:
    from collectors.hardware import Hardware, cpu_hardware

    hw = {k: cpu_hardware(cores=1, key=k) for k in (KEY_A, KEY_B, KEY_C, KEY_D)}
    hw[KEY_GPU] = Hardware(key=KEY_GPU, kind="cuda", arch="sm_90", cores=132, vector_bits=1024,
                           target={"kind": "cuda", "arch": "sm_90"}, description="fake GPU for placement")
    return hw


@pytest.fixture
def ray_cluster() -> SimCluster:
    """The cluster, started by the first test that asks for it and kept while this directory's
    tests run one after another (a test elsewhere shuts it down: the next one here starts it
    again, so a file dealt to a worker after another directory's tests finds a live cluster)."""
    return _state.get("sim") or _start()


def _start() -> SimCluster:
    import ray
    from ray.cluster_utils import Cluster

    from cluster.resources import node_resources

    if ray.is_initialized():  # another area's session left Ray running: do not mix clusters
        ray.shutdown()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "object_store_memory": NODE_OBJECT_STORE},
    )
    sim = SimCluster(cluster, sim_hardware())
    sim.add_cpu_node(KEY_A)
    sim.add_cpu_node(KEY_B)
    g = cluster.add_node(num_cpus=1, num_gpus=1, resources=node_resources(sim.hardware[KEY_GPU]),
                         object_store_memory=NODE_OBJECT_STORE)
    sim.node_ids[KEY_GPU] = [g.node_id]
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    _state["sim"] = sim
    return sim


def _shutdown() -> None:
    sim = _state.pop("sim", None)
    if sim is None:
        return
    import ray

    ray.shutdown()
    sim.cluster.shutdown()


def pytest_runtest_teardown(item, nextitem):
    """Release the cluster (~1.5 GB) once the last test of this directory has run."""
    if nextitem is None or HERE not in Path(str(nextitem.path)).resolve().parents:
        _shutdown()


@pytest.fixture
def index_url():
    """A fresh PostgreSQL database when ``TLM_TEST_PG_URL`` is set (CI), else None (SQLite)."""
    base = os.environ.get("TLM_TEST_PG_URL")
    if not base:
        yield None
        return
    from tests.helpers.pg import fresh_pg_database

    with fresh_pg_database(base, "tlm_cluster") as url:
        yield url
