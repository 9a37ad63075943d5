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

import datetime as _dt
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from collectors.hardware import Hardware

log = logging.getLogger(__name__)


@dataclass
class TaskResult:
    """What one ``collect`` call reports back to the driver (small: no records)."""

    workload_key: str  # the task
    hardware_key: str  # the hardware it was tuned for
    node_id: str  # Ray node that tuned it
    host: str  # host name of that node
    records: int = 0  # rows appended (new, after dedup)
    duplicates: int = 0  # rows the corpus already had (a retried task re-measuring)
    errors: int = 0  # rows that are build/run errors (stored as data)
    best_latency_s: float | None = None  # fastest successful candidate
    started_at: float = 0.0  # wall-clock start (time.time())
    finished_at: float = 0.0  # wall-clock end
    append_s: float = 0.0  # time spent writing parts + index rows (the shared, serial part)
    skipped: bool = False  # the index already said "done": nothing was tuned
    parts: list[str] = field(default_factory=list)  # part files written


def status_key(tune_config: Any) -> tuple[str, int]:
    """``(tuner, trials)`` of a tune config: with the task and hardware, the resume key."""
    tuner = getattr(tune_config, "tuner", None) or getattr(tune_config, "strategy", None) or "evolutionary"
    trials = None
    for name in ("trials", "max_trials", "max_trials_global", "num_trials"):
        if getattr(tune_config, name, None) is not None:
            trials = int(getattr(tune_config, name))
            break
    if trials is None:
        raise ValueError(f"tune config {tune_config!r} names no trial budget (trials / max_trials)")
    return str(tuner), trials


class Collector:
    """Tunes tasks for one hardware key and appends their records to the corpus.

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
            # Ray sets OMP_NUM_THREADS=1 in its workers and TVM's thread pool reads it (and by
            # default halves the core count on x86): without this, a measurement of an N-core
            # key would run on one thread. The runner's worker processes inherit it.
            os.environ["TVM_NUM_THREADS"] = str(self.hardware.cores)
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

    def collect(self, task: Any, tune_config: Any) -> TaskResult:
        """Tune ``task`` for this actor's hardware, streaming records into the corpus.

        Checks the index first: a task already "done" for (hardware, tuner, trials) is
        skipped, which is what makes a restarted driver (or a retry racing a slow success)
        cheap and safe.
        """
        from collectors.tuner import tune_task

        tuner, trials = status_key(tune_config)
        key = self.hardware.key
        res = TaskResult(task.workload_key, key, self.node_id, self.host, started_at=time.time())
        if self.corpus.task_status(task.workload_key, key, tuner, trials) == "done":
            res.skipped = True
            res.finished_at = time.time()
            return res

        def on_records(batch: list[dict]) -> None:
            if not batch:
                return
            for r in batch:
                r["run_id"] = self.run_id
                r.setdefault("node", self.host)
                r.setdefault("created_at", _dt.datetime.now(_dt.timezone.utc))
            t = time.perf_counter()
            out = self.corpus.append(batch)
            res.append_s += time.perf_counter() - t
            res.records += int(out.rows)
            res.duplicates += int(out.duplicates)
            if out.part_path:
                res.parts.append(str(out.part_path))
            for r in batch:
                if r.get("error") is not None:
                    res.errors += 1
                elif r.get("latency_s") is not None:
                    lat = float(r["latency_s"])
                    if res.best_latency_s is None or lat < res.best_latency_s:
                        res.best_latency_s = lat

        tune_task(task, self.hardware, tune_config, on_records=on_records, run_id=self.run_id)
        self.corpus.set_task_status(
            task.workload_key, key, tuner, trials, "done", run_id=self.run_id, records=res.records + res.duplicates
        )
        res.finished_at = time.time()
        return res


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
