"""The Ray session of a collection: join a cluster or start a local one, and see what it holds.

Only ``cluster/`` imports Ray (``tests/test_layers.py`` holds it). A local Ray advertises this
machine's hardware (``hw:<key>`` and ``measure:<key>`` resources, cluster/resources.py) so the
collectors find a slot; on a cluster each node advertises its own.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Iterator, Mapping, Sequence

from cluster.resources import keys_in_resources, measure_resource

log = logging.getLogger(__name__)

#: A local Ray's processes inherit the driver's environment when it starts them, so these reach
#: every worker. Each turns off a line a person would otherwise read twice or take for a fault:
#: Ray Train's print patch (every ``print`` of a training worker came out twice, once printed
#: and once logged), its preemption watcher (an actor for cloud node drains, whose constructor
#: fails on a local Ray and says so), Ray Data's per-block progress bars (dozens of redrawn
#: lines per epoch in a log) and its INFO lines (each execution plan, every epoch; Ray Data
#: configures its logger at import, so only its own variable reaches it), Ray Train's own
#: logging set-up in its controller (which puts its INFO lines back: "Requesting resources"),
#: and the Hugging Face progress bars of a worker loading or saving a model. Our own progress
#: lines stay.
QUIET_ENV = {
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "RAY_TRAIN_ENABLE_CONTROLLER_STRUCTURED_LOGGING": "0",
    "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
    "RAY_DATA_LOG_LEVEL": "WARNING",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}
#: Ray Train's Python loggers, in the driver and (by :func:`quiet_worker`, each worker's setup
#: hook) in every worker: warnings and errors only (``ray.LoggingConfig`` would do it too, but it
#: also adds a second handler to the driver's root logger: every warning of ours printed twice).
#: Its INFO lines (worker group start-up) say nothing a user acts on; its placement-group
#: cleaner warns every second that the state API is unavailable, which it is by design on a
#: local Ray started without the dashboard (so its lines are errors only); its autoscaling
#: coordinator client logs a traceback when a resource request times out on an overloaded CPU
#: ("safe to ignore", it says; a fixed local Ray never autoscales), seen on the demo's screen
#: while the test suite loaded both cores (so errors only).
QUIET_LOGGERS = {"ray.train": logging.WARNING,
                 "ray.train.v2._internal.execution.controller.placement_group_cleaner": logging.ERROR,
                 "ray.train.v2._internal.execution.scaling_policy.autoscaling_coordinator_client": logging.ERROR}

#: Ray's own authentication for a Ray this project starts: every Ray client (driver, worker,
#: CLI, dashboard) must present the cluster's token (``~/.ray/auth_token``, made by Ray when
#: absent). Without it anyone who can reach a Ray port can run code on every node. Set
#: ``RAY_AUTH_MODE=disabled`` to opt out (the tests do, for speed and isolation).
AUTH_MODE = "token"


def connect(address: str | None, *, object_store_mb: int = 256) -> bool:
    """Join the Ray cluster at ``address``, or start a local one advertising this machine.

    Returns whether this call started Ray (then the caller shuts it down). Only ``cluster/``
    imports Ray (tests/test_layers.py).
    """
    import os

    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=True)
        _sigterm_interrupts()
        return True
    from cluster.resources import count_gpus, detect_node_hardware, node_resources

    if os.environ.get("RAY_AUTH_MODE") is None:  # a Ray of our own: token authentication, deliberately
        os.environ["RAY_AUTH_MODE"] = AUTH_MODE
        from ray._raylet import Config

        Config.initialize("")  # Ray reads the mode once, at import: refreshed as Ray's own default does

    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    quiet_worker()  # the driver's Ray loggers as quiet as every worker's
    hws = detect_node_hardware()
    gpus = count_gpus()
    resources = node_resources(hws, {h.key: (gpus if h.kind == "cuda" else 1) for h in hws})
    log.info("starting a local Ray with %s", resources)
    ray.init(
        address="local",
        include_dashboard=False,
        runtime_env={"worker_process_setup_hook": "cluster.ray_session.quiet_worker"},
        object_store_memory=int(object_store_mb) * 1024 * 1024,
        resources=resources,
        num_gpus=gpus or None,
    )
    _sigterm_interrupts()
    return True


def quiet_worker() -> None:
    """Ray's loggers warnings-only (``QUIET_LOGGERS``): every worker's setup hook on a local Ray
    this project starts, and called by the driver that starts it."""
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def _sigterm_interrupts() -> None:
    """Make SIGTERM stop the driver like Ctrl-C (KeyboardInterrupt), so a ``kill`` of a background
    job is recorded as "interrupted". ``ray.init`` installs ``sys.exit`` for SIGTERM, which ended
    a run as "failed" with its units left "running"."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def wait_for_keys(keys: Sequence[str], timeout_s: float) -> dict:
    """Ask the autoscaler for one measurement slot of each absent key; wait for them to join.

    A cluster launched from ``ray_config.yaml`` starts worker types with ``min_workers: 0``:
    a node of a key exists only once something asks for its ``measure:`` resource. Returns the
    keys present when they all arrived or ``timeout_s`` passed.
    """
    import ray
    from ray.autoscaler.sdk import request_resources

    log.info("asking the autoscaler for %s; waiting up to %.0f s", ", ".join(keys), timeout_s)
    request_resources(bundles=[{measure_resource(k): 1} for k in keys])
    deadline = time.time() + timeout_s
    try:
        while True:
            present = keys_in_resources(ray.cluster_resources())
            if all(k in present for k in keys) or time.time() >= deadline:
                return present
            time.sleep(1.0)
    finally:
        request_resources(bundles=[])  # the collectors' own requests keep the nodes from now on


def warn_if_not_shared(corpus_root: str, index_url: str | None) -> None:
    """Say so when a multi-machine cluster writes to what is probably a machine-local corpus."""
    import ray

    hosts = {n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}
    if len(hosts) > 1 and (index_url is None or str(index_url).startswith("sqlite")):
        log.warning(
            "the cluster spans %d machines but the index is SQLite (%s): every node must see %s "
            "as the same shared directory; prefer a PostgreSQL --index-url",
            len(hosts), index_url or "default", corpus_root,
        )


@contextlib.contextmanager
def simulated_cluster(nodes: Sequence[Mapping[str, float]], *, cpus_per_node: int = 1,
                      object_store_mb: int = 80) -> Iterator[str]:
    """A multi-node Ray cluster inside this one machine (``ray.cluster_utils.Cluster``): a head
    with no CPUs and one node per entry of ``nodes`` (its custom resources), connected for the
    block; yields the cluster's address. For measuring what the cluster machinery costs
    (``bench/cluster.py``) where only one machine exists."""
    import ray
    from ray.cluster_utils import Cluster

    store = object_store_mb << 20
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                            "object_store_memory": store})
    try:
        for resources in nodes:
            cluster.add_node(num_cpus=cpus_per_node, resources=dict(resources), object_store_memory=store)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()
