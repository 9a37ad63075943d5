"""The collection job: fan (task, hardware) units out to collector actors across a Ray cluster.

How it works (docs/ARCHITECTURE.md, "Collection"):

1. The driver joins or starts Ray (cluster/ray_session.py) and reads
   ``ray.cluster_resources()`` to learn which hardware keys the cluster has and how many
   measurement slots each has (cluster/resources.py). Keys asked for but absent are reported at
   once ("unplaceable"), never waited on; keys present but not asked for are left idle.
2. It asks the index which units (task, hardware, tuner, trials) are already "done" and marks
   them "skipped": stopping the driver and starting it again resumes where the index says.
3. The dispatcher (cluster/dispatcher.py) starts one collector actor per measurement slot and
   keeps each busy with one unit; each actor runs the one collection protocol
   (``collectors.collect.collect_unit``) and appends its own records (shared storage), so the
   driver only sees small ``UnitOutcome`` values. A unit that failed, or whose actor or node
   died, is retried on whatever node of that hardware is left (record ids + idempotent
   ``append`` make the retry safe).

``run_collection`` is the whole job as one function; the CLI glue is in cluster/cli/collect.py.
"""
from __future__ import annotations

import collections
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from cluster.dispatcher import Dispatcher, make_collector
from cluster.ray_session import connect, wait_for_keys, warn_if_not_shared
from cluster.resources import keys_in_resources
from collectors.collect import CollectionSummary, UnitOutcome, run_status
from collectors.hardware import Hardware
from collectors.tasks import Task
from collectors.tuner import TuneConfig

log = logging.getLogger(__name__)


@dataclass
class JobConfig:
    """Knobs of the Ray side of a collection (the tuner's own knobs live in its TuneConfig)."""

    address: str | None = None  # None: start a local Ray; "auto" or "ray://host:10001": join one
    object_store_mb: int = 256  # object store of a local Ray; records never pass through it
    max_attempts: int = 3  # tries per (task, hardware) before it is reported failed
    lost_key_grace_s: float = 30.0  # how long queued tasks wait for a node of a vanished key
    wait_for_nodes_s: float = 0.0  # > 0: ask the autoscaler for absent keys and wait this long for them
    progress: bool = True  # one progress bar per hardware key
    actor_options: dict = field(default_factory=dict)  # extra ray actor options (e.g. runtime_env)


def run_collection(
    tasks: Sequence[Task],
    *,
    corpus_root: str,
    index_url: str | None = None,
    tune_config: TuneConfig,
    hardware_keys: Sequence[str] | None = None,
    hardware: Mapping[str, Hardware] | None = None,
    config: JobConfig | None = None,
    params: Mapping[str, Any] | None = None,
) -> CollectionSummary:
    """Collect ``tasks`` on every hardware in ``hardware_keys`` (None: all present) with Ray.

    ``tune_config``'s strategy and trial budget, with the task and hardware, form the resume key. ``hardware`` gives the
    :class:`Hardware` of a key explicitly instead of letting each node detect it: needed when
    several simulated nodes on one machine advertise different keys (tests, benchmarks).
    ``params`` are stored with the run in the index.

    The steps: :func:`_placement` (which keys the cluster has), :func:`_plan` (a unit per task and
    key: queued, skipped as done, or unplaceable), the :class:`Dispatcher` (collectors kept busy),
    and :func:`_record_end` (the run's and the units' final status in the index).
    """
    import ray

    from collectors.tasks import register_tasks
    from storage import Corpus

    cfg = config or JobConfig()
    if cfg.max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {cfg.max_attempts}")
    tuner, trials = tune_config.tuner_name, tune_config.trials
    tasks = list({t.workload_key: t for t in tasks}.values())  # one unit per workload
    if "://" not in str(corpus_root):  # actors on other nodes must see the same directory
        corpus_root = os.path.abspath(os.path.expanduser(str(corpus_root)))
    started_ray = connect(cfg.address, object_store_mb=cfg.object_store_mb)
    warn_if_not_shared(corpus_root, index_url)
    t0 = time.time()
    corpus = Corpus.open(corpus_root, index_url=index_url)
    wanted, present, idle, missing = _placement(hardware_keys, cfg, len(tasks))
    run_id = corpus.start_run("collect", {"tuner": tuner, "trials": trials, "hardware": wanted, "tasks": len(tasks),
                                          **dict(params or {})})
    register_tasks(corpus, tasks)
    outcomes, queues = _plan(corpus, tasks, wanted, present, tune_config)
    dispatcher = Dispatcher(
        queues=queues,
        outcomes=outcomes,
        tasks={t.workload_key: t for t in tasks},
        tune_config=tune_config,
        make_actor=lambda key: make_collector(key, corpus_root, index_url, run_id, (hardware or {}).get(key),
                                              cfg.actor_options),
        max_attempts=cfg.max_attempts,
        lost_key_grace_s=cfg.lost_key_grace_s,
        progress=cfg.progress,
    )
    status = "failed"
    try:
        dispatcher.run()
        status = run_status(list(outcomes.values()))
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        dispatcher.close()
        summary = CollectionSummary(run_id, status, list(outcomes.values()), tuner=tuner, trials=trials,
                                    hardware_keys=wanted, idle_keys=idle, missing_keys=missing,
                                    wall_s=time.time() - t0)
        _record_end(corpus, run_id, status, outcomes.values(), tuner, trials)
        if started_ray:
            ray.shutdown()
    log.info("collection %s: %s", run_id, summary.as_dict())
    return summary


def _placement(hardware_keys: Sequence[str] | None, cfg: JobConfig,
               n_tasks: int) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(wanted, present, idle, missing)`` hardware keys: the ones asked for (None: every key
    present), the ones the cluster advertises (after waiting for absent ones, if asked), those
    present but not needed, and those asked for but absent (their units are unplaceable)."""
    import ray

    present = keys_in_resources(ray.cluster_resources())
    wanted = list(dict.fromkeys(hardware_keys)) if hardware_keys else list(present)
    missing = [k for k in wanted if k not in present]
    if missing and cfg.wait_for_nodes_s > 0:
        present = wait_for_keys(missing, cfg.wait_for_nodes_s)
        missing = [k for k in wanted if k not in present]
    idle = [k for k in present if k not in wanted]
    for k in idle:
        log.info("hardware %s is in the cluster but no task needs it: its node(s) stay idle", k)
    for k in missing:
        log.warning("no node advertises measure:%s: its %d task(s) are reported unplaceable", k, n_tasks)
    return wanted, list(present), idle, missing


def _plan(corpus: Any, tasks: Sequence[Task], wanted: Sequence[str], present: Sequence[str],
          tune_config: TuneConfig) -> tuple[dict[tuple[str, str], UnitOutcome], dict[str, collections.deque]]:
    """One outcome per (task, key), and per present key the queue of workload keys to collect: a
    unit the index marks done is skipped, a unit of an absent key is unplaceable."""
    tuner, trials = tune_config.tuner_name, tune_config.trials
    outcomes: dict[tuple[str, str], UnitOutcome] = {}
    queues: dict[str, collections.deque] = {k: collections.deque() for k in wanted if k in present}
    for k in wanted:
        for t in tasks:
            o = UnitOutcome.of(t, k, tune_config)
            outcomes[(t.workload_key, k)] = o
            if k not in present:
                o.status, o.error = "unplaceable", f"no node advertises measure:{k}"
            elif corpus.task_status(t.workload_key, k, tuner, trials) == "done":
                o.status = "skipped"
            else:
                queues[k].append(t.workload_key)
    return outcomes, queues


def _record_end(corpus: Any, run_id: str, status: str, outcomes: Iterable[UnitOutcome], tuner: str,
                trials: int) -> None:
    """The run's status, and the status of units that ended without their collector saying so
    (failed, unplaceable, or stopped with an interrupted job). Never raises: the job's own error,
    if any, is the one to see."""
    try:
        # units this run started and a collector did not report back: "running", or the "failed"
        # a collector writes on its way out when it is killed with the job (its workers die first)
        stopped = {(r["workload_key"], r["hardware_key"]) for r in corpus.task_statuses(run_id=run_id)
                   if r["tuner"] == tuner and r["trials"] == trials and r["status"] in ("running", "failed")}
        for o in outcomes:
            if o.status in ("failed", "unplaceable"):
                corpus.set_task_status(o.workload_key, o.hardware_key, tuner, trials, o.status, run_id=run_id, records=0)
            elif status == "interrupted" and o.status == "pending" and (
                    (o.workload_key, o.hardware_key) in stopped
                    or corpus.task_status(o.workload_key, o.hardware_key, tuner, trials) == "running"):
                # its collector was stopped with the job: say so (resume re-tunes it either way)
                corpus.set_task_status(o.workload_key, o.hardware_key, tuner, trials, "interrupted", run_id=run_id)
        corpus.finish_run(run_id, status)
    except Exception:  # noqa: BLE001 - never hide the job's own error behind this one
        log.exception("could not record the end of run %s", run_id)
