"""The collection job: fan (task, hardware) pairs out to collector actors across a Ray cluster.

How it works (DESIGN.md section 4):

1. The driver reads ``ray.cluster_resources()`` to learn which hardware keys the cluster has
   and how many measurement slots each has (cluster/resources.py). Keys asked for but absent
   are reported at once, never waited on; keys present but not asked for are left idle with
   a message.
2. It asks the index which (task, hardware, tuner, trials) are already "done" and drops them:
   stopping the driver and starting it again resumes where the index says.
3. It starts one :class:`~cluster.collector.Collector` actor per measurement slot (Ray places
   it on a node that advertises ``measure:<key>``) and keeps each ready actor busy with one
   task; everything in flight is gathered with a ``ray.wait`` loop.
4. Actors append records themselves (shared storage), so the driver only sees small
   :class:`~cluster.collector.TaskResult` values. A collector or node that dies loses at most
   its task's unflushed batch; the task goes back in its key's queue and is retried on whatever
   node of that hardware is left (record ids + idempotent ``append`` make the retry safe).
   When no node of a key remains, its queued tasks are reported failed after a grace period.

``run_collection`` is the whole job as one function; ``add_cluster_arguments`` adds the
``--address`` and related flags to any CLI parser that wants to run it.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from collectors.hardware import Hardware
from cluster.collector import Collector, TaskResult, status_key
from cluster.resources import HW_FRACTION, hw_resource, keys_in_resources, measure_resource

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


@dataclass
class Outcome:
    """The end state of one (task, hardware) pair in a job."""

    workload_key: str  # the task
    hardware_key: str  # the hardware
    task_name: str  # for people
    status: str  # "done", "skipped" (index said done), "failed", "unplaceable"
    attempts: int = 0  # how many times it was handed to a collector
    node_id: str = ""  # node that finished it
    host: str = ""  # its host name
    records: int = 0  # new records
    duplicates: int = 0  # records the corpus already had
    errors: int = 0  # error records among them
    best_latency_s: float | None = None  # fastest candidate
    started_at: float = 0.0  # time.time() when the successful attempt began
    finished_at: float = 0.0  # and when it ended
    append_s: float = 0.0  # time its collector spent appending to the corpus
    error: str = ""  # why it failed (last attempt)


@dataclass
class CollectionSummary:
    """What ``run_collection`` returns (and records in the index's ``runs`` table)."""

    run_id: str
    status: str  # "finished" (every pair done or skipped), "partial" (some failed), "failed"
    outcomes: list[Outcome]
    idle_keys: list[str]  # hardware present but not asked for
    missing_keys: list[str]  # hardware asked for but absent
    wall_s: float

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def records(self) -> int:
        return sum(o.records for o in self.outcomes)

    @property
    def duplicates(self) -> int:
        return sum(o.duplicates for o in self.outcomes)

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "done": self.count("done"),
            "skipped": self.count("skipped"),
            "failed": self.count("failed"),
            "unplaceable": self.count("unplaceable"),
            "records": self.records,
            "duplicates": self.duplicates,
            "idle_keys": self.idle_keys,
            "missing_keys": self.missing_keys,
            "wall_s": round(self.wall_s, 3),
        }


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags that say where a collection runs (for ``tlm collect``).

    Made to sit next to ``cluster.cmd_collect.add_collect_arguments``: in cluster mode that
    parser's ``--hardware`` is read as the keys to collect for (comma-separated or ``all``;
    default: every key present), see :func:`hardware_keys_from_args`.
    """
    g = parser.add_argument_group("cluster (Ray)")
    g.add_argument(
        "--address",
        default=None,
        help="collect on a Ray cluster: 'auto' (the one this node belongs to), 'ray://HOST:10001', "
        "or 'local' to start a local Ray advertising this machine's hardware",
    )
    g.add_argument("--max-attempts", type=int, default=3, help="tries per task before it is reported failed")
    g.add_argument(
        "--wait-for-nodes",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="ask the autoscaler for nodes of requested-but-absent hardware and wait this long",
    )
    g.add_argument("--object-store-mb", type=int, default=256, help="object store of a local Ray (MiB)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def job_config_from_args(args: argparse.Namespace) -> JobConfig:
    """A :class:`JobConfig` from the flags ``add_cluster_arguments`` added."""
    address = getattr(args, "address", None)
    return JobConfig(
        address=None if address in (None, "", "local") else address,
        object_store_mb=getattr(args, "object_store_mb", 256),
        max_attempts=getattr(args, "max_attempts", 3),
        wait_for_nodes_s=getattr(args, "wait_for_nodes", 0.0),
        progress=not getattr(args, "no_progress", False),
    )


def hardware_keys_from_args(args: argparse.Namespace) -> list[str] | None:
    """``--hardware`` as a list of keys, ``None`` meaning every key present in the cluster."""
    raw = getattr(args, "hardware", None)
    values = raw if isinstance(raw, (list, tuple)) else [raw] if raw else []
    keys = [k.strip() for v in values for k in str(v).split(",") if k.strip()]
    return None if not keys or "all" in keys else keys


def collect_from_args(args: argparse.Namespace, *, hardware: Mapping[str, Hardware] | None = None) -> int:
    """``tlm collect --address ...``: the model's tasks collected on the cluster.

    Reads the options of ``cluster.cmd_collect.add_collect_arguments`` (model, trials,
    strategy, tasks, corpus, index URL, seed, zoo sizes) and of :func:`add_cluster_arguments`.
    Returns 0 when every (task, hardware) pair is done, 1 otherwise.
    """
    from collectors.hardware import detect_hardware
    from collectors.tuner import TuneConfig

    config = TuneConfig(
        trials=args.trials, strategy=args.strategy, seed=args.seed,
        trials_per_iter=getattr(args, "trials_per_iter", 64), check_correctness=not getattr(args, "no_check", False),
    )
    zoo = {k: getattr(args, k) for k in ("batch", "image_size", "seq_len", "small", "seed") if hasattr(args, k)}
    if str(args.model).endswith(".onnx"):
        zoo = {}
    tasks = tasks_for_models([args.model], detect_hardware("cpu"), max_tasks=getattr(args, "tasks", None), **zoo)
    summary = run_collection(
        tasks,
        corpus_root=args.corpus,
        index_url=getattr(args, "index_url", None),
        tune_config=config,
        hardware_keys=hardware_keys_from_args(args),
        hardware=hardware,
        config=job_config_from_args(args),
        params={"model": args.model},
    )
    print(json.dumps(summary.as_dict(), indent=2))
    for o in summary.outcomes:
        if o.status in ("failed", "unplaceable"):
            print(f"{o.status}: {o.task_name} on {o.hardware_key}: {o.error}", file=sys.stderr)
    return 0 if summary.status == "finished" else 1


def connect(address: str | None, *, object_store_mb: int = 256) -> bool:
    """Join the Ray cluster at ``address``, or start a local one advertising this machine.

    Returns whether this call started Ray (then the caller shuts it down). Only ``cluster/``
    calls ``ray.init`` (DESIGN.md section 2).
    """
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=True)
        return True
    from cluster.resources import count_gpus, detect_node_hardware, node_resources

    hws = detect_node_hardware()
    gpus = count_gpus()
    resources = node_resources(hws, {h.key: (gpus if h.kind == "cuda" else 1) for h in hws})
    log.info("starting a local Ray with %s", resources)
    ray.init(
        address="local",
        include_dashboard=False,
        object_store_memory=int(object_store_mb) * 1024 * 1024,
        resources=resources,
        num_gpus=gpus or None,
    )
    return True


def tasks_for_models(models: Iterable[Any], hardware: Hardware, *, max_tasks: int | None = None, **zoo_kwargs: Any) -> list[Any]:
    """Tasks of the given models, one per workload key (the weights of repeats are summed).

    Extracted once, on the driver, for ``hardware`` (its CPU): the subgraphs come from the
    target-independent ``zero`` pipeline, so the same tasks serve every key. ``max_tasks``
    keeps each model's heaviest N (``extract_tasks`` sorts them by FLOPs x weight).
    """
    from collectors.tasks import extract_tasks

    by_key: dict[str, Any] = {}
    for model in models:
        found = extract_tasks(model, hardware, **zoo_kwargs)
        for t in found[:max_tasks] if max_tasks else found:
            if t.workload_key in by_key:
                by_key[t.workload_key].weight += t.weight
            else:
                by_key[t.workload_key] = t
    return list(by_key.values())


def run_collection(
    tasks: Sequence[Any],
    *,
    corpus_root: str,
    index_url: str | None = None,
    tune_config: Any,
    hardware_keys: Sequence[str] | None = None,
    hardware: Mapping[str, Hardware] | None = None,
    config: JobConfig | None = None,
    params: Mapping[str, Any] | None = None,
) -> CollectionSummary:
    """Collect ``tasks`` on every hardware in ``hardware_keys`` (None: all present) with Ray.

    ``tasks`` are ``collectors.task.Task`` values; ``tune_config`` is the collectors'
    ``TuneConfig`` (its tuner and trial budget form the resume key). ``hardware`` gives the
    :class:`Hardware` of a key explicitly instead of letting each node detect it: needed when
    several simulated nodes on one machine advertise different keys (tests, benchmarks).
    ``params`` are stored with the run in the index.
    """
    import ray

    from collectors.tasks import register_tasks
    from storage import Corpus

    cfg = config or JobConfig()
    if cfg.max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {cfg.max_attempts}")
    tuner, trials = status_key(tune_config)
    tasks = list({t.workload_key: t for t in tasks}.values())  # one unit per workload
    if "://" not in str(corpus_root):  # actors on other nodes must see the same directory
        corpus_root = os.path.abspath(os.path.expanduser(str(corpus_root)))
    started_ray = connect(cfg.address, object_store_mb=cfg.object_store_mb)
    _warn_if_not_shared(corpus_root, index_url)
    t0 = time.time()
    corpus = Corpus.open(corpus_root, index_url=index_url)
    present = keys_in_resources(ray.cluster_resources())
    wanted = list(dict.fromkeys(hardware_keys)) if hardware_keys else list(present)
    missing = [k for k in wanted if k not in present]
    if missing and cfg.wait_for_nodes_s > 0:
        present = _wait_for_keys(missing, cfg.wait_for_nodes_s)
        missing = [k for k in wanted if k not in present]
    idle = [k for k in present if k not in wanted]
    for k in idle:
        log.info("hardware %s is in the cluster but no task needs it: its node(s) stay idle", k)
    for k in missing:
        log.warning("no node advertises measure:%s: its %d task(s) are reported unplaceable", k, len(tasks))

    run_id = corpus.start_run(
        "collect",
        {
            "tuner": tuner,
            "trials": trials,
            "hardware": wanted,
            "tasks": len(tasks),
            **dict(params or {}),
        },
    )
    register_tasks(corpus, tasks)

    outcomes: dict[tuple[str, str], Outcome] = {}
    queues: dict[str, collections.deque] = {k: collections.deque() for k in wanted if k in present}
    by_key_task = {t.workload_key: t for t in tasks}
    for k in wanted:
        for t in tasks:
            o = Outcome(t.workload_key, k, t.task_name, status="pending")
            outcomes[(t.workload_key, k)] = o
            if k not in present:
                o.status, o.error = "unplaceable", f"no node advertises measure:{k}"
            elif corpus.task_status(t.workload_key, k, tuner, trials) == "done":
                o.status = "skipped"
            else:
                queues[k].append(t.workload_key)

    dispatcher = _Dispatcher(
        queues=queues,
        outcomes=outcomes,
        tasks=by_key_task,
        tune_config=tune_config,
        make_actor=lambda key: make_collector(key, corpus_root, index_url, run_id, (hardware or {}).get(key), cfg),
        cfg=cfg,
    )
    status = "failed"
    try:
        dispatcher.run()
        failed = sum(1 for o in outcomes.values() if o.status in ("failed", "unplaceable"))
        status = "finished" if failed == 0 else "partial"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        dispatcher.close()
        summary = CollectionSummary(run_id, status, list(outcomes.values()), idle, missing, time.time() - t0)
        try:
            for o in outcomes.values():
                if o.status in ("failed", "unplaceable"):
                    corpus.set_task_status(o.workload_key, o.hardware_key, tuner, trials, o.status, run_id=run_id, records=0)
            corpus.finish_run(run_id, status)
        except Exception:  # noqa: BLE001 - never hide the job's own error behind this one
            log.exception("could not record the end of run %s", run_id)
        if started_ray:
            ray.shutdown()
    log.info("collection %s: %s", run_id, summary.as_dict())
    return summary


def _wait_for_keys(keys: Sequence[str], timeout_s: float) -> dict:
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


def _warn_if_not_shared(corpus_root: str, index_url: str | None) -> None:
    """Say so when a multi-machine cluster writes to what is probably a machine-local corpus."""
    import ray

    hosts = {n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}
    if len(hosts) > 1 and (index_url is None or str(index_url).startswith("sqlite")):
        log.warning(
            "the cluster spans %d machines but the index is SQLite (%s): every node must see %s "
            "as the same shared directory; prefer a PostgreSQL --index-url",
            len(hosts), index_url or "default", corpus_root,
        )


def make_collector(
    key: str,
    corpus_root: str,
    index_url: str | None,
    run_id: str,
    hw: Hardware | None = None,
    cfg: JobConfig | None = None,
):
    """One collector actor holding one measurement slot of ``key`` (and one GPU for a GPU key).

    ``hw`` None: the actor detects its node's hardware and refuses a node that is not ``key``.
    """
    import ray

    options: dict[str, Any] = {
        "resources": {hw_resource(key): HW_FRACTION, measure_resource(key): 1},
        "num_cpus": 0,
        "max_restarts": 0,
        "max_task_retries": 0,
    }
    if key.startswith("cuda-"):
        options["num_gpus"] = 1
    options.update((cfg or JobConfig()).actor_options)
    return ray.remote(Collector).options(**options).remote(key, corpus_root, index_url, run_id, hw)


@dataclass
class _Actor:
    key: str
    handle: Any
    ready: bool = False
    busy: str | None = None  # workload key in flight
    attempt_started: float = 0.0


class _Dispatcher:
    """The driver's gather loop: keeps every ready actor busy, retries, reports progress."""

    def __init__(self, *, queues, outcomes, tasks, tune_config, make_actor, cfg: JobConfig) -> None:
        self.queues: dict[str, collections.deque] = queues
        self.outcomes: dict[tuple[str, str], Outcome] = outcomes
        self.tasks = tasks
        self.tune_config = tune_config
        self.make_actor = make_actor
        self.cfg = cfg
        self.actors: list[_Actor] = []
        self.pending: dict[Any, tuple[str, _Actor]] = {}  # ObjectRef -> ("ready"|"collect", actor)
        self.lost_since: dict[str, float] = {}
        self.init_failures: collections.Counter = collections.Counter()
        self.bars: dict[str, Any] = {}

    # -- actors -------------------------------------------------------------------------
    def _slots(self) -> dict[str, int]:
        import ray

        return {k: c.slots for k, c in keys_in_resources(ray.cluster_resources()).items()}

    def _grow(self) -> None:
        """Start actors up to the slots the cluster has now for every key with queued work."""
        slots = self._slots()
        for key, q in self.queues.items():
            if not q:
                continue
            have = sum(1 for a in self.actors if a.key == key)
            want = min(slots.get(key, 0), have + len(q)) - have
            for _ in range(max(0, want)):
                a = _Actor(key, self.make_actor(key))
                self.actors.append(a)
                self.pending[a.handle.where.remote()] = ("ready", a)

    def _drop(self, a: _Actor) -> None:
        import ray

        if a in self.actors:
            self.actors.remove(a)
        try:
            ray.kill(a.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead is fine
            pass

    def _dispatch(self) -> None:
        for a in self.actors:
            q = self.queues[a.key]
            if a.ready and a.busy is None and q:
                wk = q.popleft()
                o = self.outcomes[(wk, a.key)]
                o.attempts += 1
                a.busy = wk
                a.attempt_started = time.time()
                self.pending[a.handle.collect.remote(self.tasks[wk], self.tune_config)] = ("collect", a)

    def _check_lost_keys(self) -> None:
        """Fail the queue of a key that has no node left (after a grace period)."""
        now = time.time()
        slots = None
        for key, q in self.queues.items():
            working = any(a.key == key and (a.ready or a.busy) for a in self.actors)
            if not q or working:
                self.lost_since.pop(key, None)
                continue
            if slots is None:
                slots = self._slots()
            if slots.get(key, 0) > 0:
                self.lost_since.pop(key, None)
                continue
            since = self.lost_since.setdefault(key, now)
            if now - since >= self.cfg.lost_key_grace_s:
                self._fail_queue(key, f"no node with measure:{key} left in the cluster")

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        import ray

        self._open_bars()
        self._grow()
        self._dispatch()
        last_grow = time.time()
        while any(self.queues.values()) or any(kind == "collect" for kind, _ in self.pending.values()):
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=1.0) if self.pending else ([], [])
            for ref in ready:
                kind, a = self.pending.pop(ref)
                try:
                    value = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError) as exc:
                    self._actor_lost(a, exc)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    if kind == "ready":  # the actor's __init__ failed: a broken node, not a task
                        self._init_failed(a, exc)
                        continue
                    self._task_error(a, exc)
                    continue
                if kind == "ready":
                    a.ready = True
                    log.debug("collector for %s ready on %s", a.key, value.get("host"))
                else:
                    self._task_done(a, value)
            if time.time() - last_grow > 2.0:
                self._grow()
                self._check_lost_keys()
                last_grow = time.time()
            self._dispatch()

    def _task_done(self, a: _Actor, r: TaskResult) -> None:
        o = self.outcomes[(r.workload_key, r.hardware_key)]
        a.busy = None
        o.status = "skipped" if r.skipped else "done"
        o.node_id, o.host = r.node_id, r.host
        o.records, o.duplicates, o.errors = r.records, r.duplicates, r.errors
        o.best_latency_s, o.started_at, o.finished_at = r.best_latency_s, r.started_at, r.finished_at
        o.append_s = r.append_s
        o.error = ""
        self._tick(a.key)

    def _retry_or_fail(self, key: str, wk: str, why: str) -> None:
        o = self.outcomes[(wk, key)]
        o.error = why
        if o.attempts < self.cfg.max_attempts:
            log.warning("task %s on %s: attempt %d failed (%s); retrying", o.task_name, key, o.attempts, why)
            self.queues[key].appendleft(wk)
        else:
            log.error("task %s on %s failed after %d attempt(s): %s", o.task_name, key, o.attempts, why)
            o.status = "failed"
            self._tick(key)

    def _actor_lost(self, a: _Actor, exc: Exception) -> None:
        wk = a.busy
        log.warning("collector for %s died (%s)", a.key, _short(exc))
        self._drop(a)
        # Drop the dead actor's other pending refs (its readiness ping, if any).
        for ref, (_, other) in list(self.pending.items()):
            if other is a:
                self.pending.pop(ref)
        if wk is not None:
            self._retry_or_fail(a.key, wk, f"collector died: {_short(exc)}")
        self._grow()

    def _init_failed(self, a: _Actor, exc: Exception) -> None:
        why = _short(exc)
        log.error("collector for %s failed to start: %s", a.key, why)
        self._drop(a)
        self.init_failures[a.key] += 1
        if self.init_failures[a.key] >= self.cfg.max_attempts:
            self._fail_queue(a.key, f"collector for {a.key} failed to start {self.init_failures[a.key]} times: {why}")

    def _fail_queue(self, key: str, why: str) -> None:
        q = self.queues[key]
        if q:
            log.error("%d queued task(s) on %s fail: %s", len(q), key, why)
        while q:
            o = self.outcomes[(q.popleft(), key)]
            o.status, o.error = "failed", why
            self._tick(key)
        for a in [a for a in self.actors if a.key == key and a.busy is None]:
            self._drop(a)

    def _task_error(self, a: _Actor, exc: Exception) -> None:
        wk, a.busy = a.busy, None
        if wk is not None:
            self._retry_or_fail(a.key, wk, _short(exc))

    # -- progress -------------------------------------------------------------------------
    def _open_bars(self) -> None:
        if not self.cfg.progress:
            return
        from tqdm.auto import tqdm

        for i, key in enumerate(self.queues):
            total = sum(1 for (wk, k) in self.outcomes if k == key)
            done = sum(1 for (wk, k), o in self.outcomes.items() if k == key and o.status == "skipped")
            self.bars[key] = tqdm(total=total, initial=done, desc=key, unit="task", position=i, leave=True)

    def _tick(self, key: str) -> None:
        bar = self.bars.get(key)
        if bar is not None:
            bar.update(1)
            o = [x for (wk, k), x in self.outcomes.items() if k == key]
            bar.set_postfix(records=sum(x.records for x in o), failed=sum(x.status == "failed" for x in o))

    def close(self) -> None:
        for a in list(self.actors):
            self._drop(a)
        for bar in self.bars.values():
            bar.close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:300]


def outcomes_as_dicts(summary: CollectionSummary) -> list[dict]:
    """Outcomes as plain dicts (for JSON reports)."""
    return [asdict(o) for o in summary.outcomes]
