"""Work that must run on a node of one hardware key, through a collection actor of that key.

A ``tlm compile --address`` measures candidates and times whole-model builds: code of a key runs
only on a node of that key (``collectors.hardware.check_runs_here``), and a measurement must never
share the device with another (the collectors' ``measure:<key>`` slot, cluster/collector.py).
So the work goes to a :class:`cluster.collector.Collector` placed as the collection places one:
it holds the device's slot for as long as the work runs (no collector of a collection measures
beside it), it has the node's hardware and its TVM threads pinned, and the records the work
appends land in the shared corpus as it goes (a lost node or a Ctrl-C keeps what was measured).
The work is opened as a run of the corpus (``tlm runs`` lists it) and closed with its outcome.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable

from cluster.dispatcher import make_collector
from cluster.ray_session import connect, warn_if_not_shared
from cluster.resources import keys_in_resources
from collectors.hardware import Hardware

log = logging.getLogger(__name__)


#: Seconds a job waits for its key's measurement slot before it says it is waiting.
SLOT_WAIT_SAY_S = 10.0


class NoNodeOfKey(ValueError):
    """The cluster has no node advertising the key's measurement slot (the message lists those it has)."""


@dataclass(frozen=True)
class NodeJob:
    """Where a job runs: the cluster (``address``: None starts a local Ray advertising this
    machine), the hardware key (None: the cluster's only key), the shared corpus it writes to."""

    corpus_root: str
    index_url: str | None = None
    address: str | None = None
    hardware_key: str | None = None
    object_store_mb: int = 256


def run_on_node(job: NodeJob, kind: str, fn: Callable[..., Any], *args: Any, params: dict | None = None,
                hardware: Hardware | None = None,
                announce: Callable[[dict], None] | None = None) -> tuple[Any, dict]:
    """``fn(node_hardware, *args)`` on a collection actor of ``job``'s key; ``(its result, where
    it ran)`` (``Collector.where``: host, node id, pid). ``hardware`` gives the key's
    :class:`Hardware` instead of the node detecting it (simulated nodes on one machine, tests);
    ``announce(where)`` is called once the actor is placed, before the work starts.
    ``fn`` and ``args`` travel by pickle: a module-level function of an installed package."""
    import ray

    from storage import Corpus

    root = job.corpus_root if "://" in str(job.corpus_root) else os.path.abspath(os.path.expanduser(job.corpus_root))
    started = connect(job.address, object_store_mb=job.object_store_mb)
    actor = None
    try:
        key = _key(job.hardware_key, keys_in_resources(ray.cluster_resources()))
        warn_if_not_shared(root, job.index_url)
        with Corpus.open(root, index_url=job.index_url) as corpus:
            run_id = corpus.start_run(kind, {"hardware": key, **(params or {})})
        status = "failed"
        try:
            actor = make_collector(key, root, job.index_url, run_id, hardware)
            ready = actor.where.remote()
            if not ray.wait([ready], timeout=SLOT_WAIT_SAY_S)[0]:
                log.warning("every measure:%s slot of the cluster is held (a collection measures there): "
                            "waiting for one", key)
            where = ray.get(ready)
            log.debug("%s on %s (node %s, hardware %s)", kind, where["host"], where["node_id"][:8], key)
            if announce is not None:
                announce(where)
            try:
                result = ray.get(actor.run_here.remote(fn, *args))
            except ray.exceptions.RayTaskError as exc:  # the node's own error (a user's mistake reads as one)
                raise (exc.cause if isinstance(exc.cause, Exception) else exc) from exc
            status = "done"
            return result, where
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            if actor is not None:
                ray.kill(actor)  # the slot is freed; what it measured is in the corpus already
            with Corpus.open(root, index_url=job.index_url) as corpus:
                corpus.finish_run(run_id, status)
    finally:
        if started:
            ray.shutdown()


def _key(wanted: str | None, present: dict) -> str:
    """The key a job runs on: ``wanted``, which a node must advertise, else the cluster's only one."""
    if wanted is not None:
        if wanted not in present:
            raise NoNodeOfKey(f"no node of the cluster advertises hardware {wanted!r} (measure:{wanted}); "
                              f"it has {', '.join(sorted(present)) or 'none'}")
        return wanted
    if len(present) != 1:
        raise NoNodeOfKey(f"the cluster has {len(present)} hardware keys ({', '.join(sorted(present)) or 'none'}): "
                          "name one with --hardware")
    return next(iter(present))
