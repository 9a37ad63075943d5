"""The collector actor: tunes one task at a time on the node it was placed on.

One actor holds one ``measure:<key>`` slot for its whole life, so the number of collectors of a
hardware key equals the number of devices of that key in the cluster, and two measurements
never share a device. Inside a task, MetaSchedule's builder still compiles candidates in
parallel on the node's cores; only the runner touches the device. On a CPU this is also what
keeps measurements clean: another task's builds would steal the cores being timed.

The actor writes its own records: every measurement batch the tuner hands back is appended
to the corpus right away (one part file, one index transaction), so a dying actor loses at
most the batch in flight, and the driver never carries record payloads. This is why the corpus
must be shared storage (a shared path or a ``pyarrow.fs`` URI, and a shared index URL) when
the cluster spans machines.
"""
from __future__ import annotations

import logging
import os
import socket
from typing import Any, Callable

from collectors.collect import UnitOutcome, collect_unit
from collectors.hardware import Hardware
from collectors.tasks import Task
from collectors.threads import pin_tvm_threads
from collectors.tuner import TuneConfig

log = logging.getLogger(__name__)


class Collector:
    """Collects units for one hardware key into the corpus (``collectors.collect.collect_unit``).

    Created by the driver as a Ray actor with ``resources={"hw:<key>": 0.01,
    "measure:<key>": 1}`` (``num_gpus=1`` as well for a GPU key).
    """

    def __init__(
        self,
        hardware_key: str,
        corpus_root: str,
        index_url: str | None,
        run_id: str,
        hardware: Hardware | None = None,
    ) -> None:
        from storage import Corpus

        self.hardware = hardware if hardware is not None else _detect(hardware_key)
        if self.hardware.key != hardware_key:
            raise ValueError(f"collector for {hardware_key!r} got hardware {self.hardware.key!r}")
        if self.hardware.kind == "cpu":
            # Ray sets OMP_NUM_THREADS=1 in its workers; the runner's worker processes inherit this.
            pin_tvm_threads(self.hardware.cores)
        self.run_id = run_id
        self.host = socket.gethostname()
        self.node_id = _node_id()
        self.corpus = Corpus.open(corpus_root, index_url=index_url)
        self.corpus.register_hardware(
            self.hardware.key, target=dict(self.hardware.target), description=self.hardware.description
        )
        log.info("collector for %s ready on %s (node %s)", hardware_key, self.host, self.node_id[:8])

    def where(self) -> dict[str, Any]:
        """Where this actor runs: used by the driver as its readiness ping, and by tests."""
        return {
            "hardware_key": self.hardware.key,
            "node_id": self.node_id,
            "host": self.host,
            "pid": os.getpid(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
        }

    def collect(self, task: Task, tune_config: TuneConfig) -> UnitOutcome:
        """Collect ``task`` for this actor's hardware, streaming records into the corpus.

        The index is asked first: a unit already "done" comes back "skipped", which is what
        makes a restarted driver (or a retry racing a slow success) cheap and safe.
        """
        return collect_unit(self.corpus, task, self.hardware, tune_config, run_id=self.run_id, node_id=self.node_id)

    def run_here(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(this node's hardware, *args)``, while this actor holds the device's measurement
        slot: work that measures on the key's device outside a collection, such as a whole-model
        compile (``cluster/node_job.py``)."""
        return fn(self.hardware, *args)


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (direct use in a test) there is no node id
        return "local"


def _detect(hardware_key: str) -> Hardware:
    """This node's hardware for ``hardware_key``; a node advertising a key it is not is an error."""
    from cluster.resources import detect_node_hardware

    found = detect_node_hardware(with_cpu=True)
    for hw in found:
        if hw.key == hardware_key:
            return hw
    raise RuntimeError(
        f"this node advertises hw:{hardware_key} but detects {[h.key for h in found]}; "
        "fix its 'ray start --resources' line (tlm node-resources prints the right one)"
    )
