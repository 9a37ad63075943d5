"""The driver's dispatcher: collector actors, one per measurement slot, kept busy with units.

Each ready actor gets one unit at a time; everything in flight is gathered with one
``ray.wait`` loop (no ``ray.get`` in a loop). A unit that comes back "failed", or whose actor
or node died, goes back to the front of its key's queue until ``max_attempts``; a key with no
node left fails its queue after a grace period. Progress: one bar per hardware key.
"""
from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from cluster.collector import Collector
from cluster.resources import HW_FRACTION, hw_resource, keys_in_resources, measure_resource
from collectors.collect import UnitOutcome
from collectors.hardware import Hardware

log = logging.getLogger(__name__)


def make_collector(
    key: str,
    corpus_root: str,
    index_url: str | None,
    run_id: str,
    hw: Hardware | None = None,
    actor_options: dict | None = None,
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
    options.update(actor_options or {})
    return ray.remote(Collector).options(**options).remote(key, corpus_root, index_url, run_id, hw)


@dataclass
class _Actor:
    key: str
    handle: Any
    ready: bool = False
    busy: str | None = None  # workload key in flight
    attempt_started: float = 0.0


class Dispatcher:
    """The driver's gather loop: keeps every ready actor busy, retries, reports progress."""

    def __init__(self, *, queues: dict[str, collections.deque], outcomes: dict[tuple[str, str], UnitOutcome],
                 tasks: dict[str, Any], tune_config: Any, make_actor: Callable[[str], Any],
                 max_attempts: int = 3, lost_key_grace_s: float = 30.0, progress: bool = True) -> None:
        self.queues = queues  # hardware key -> workload keys waiting
        self.outcomes = outcomes  # (workload key, hardware key) -> outcome, updated in place
        self.tasks = tasks
        self.tune_config = tune_config
        self.make_actor = make_actor
        self.max_attempts = max_attempts  # tries per unit before it is reported failed
        self.lost_key_grace_s = lost_key_grace_s  # how long a queue waits for a node of a vanished key
        self.progress = progress
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
            if now - since >= self.lost_key_grace_s:
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

    def _task_done(self, a: _Actor, r: UnitOutcome) -> None:
        a.busy = None
        key = (r.workload_key, r.hardware_key)
        attempts = self.outcomes[key].attempts
        if r.status == "failed":
            self.outcomes[key] = replace(r, attempts=attempts, status="pending")
            self._retry_or_fail(a.key, r.workload_key, r.error)
            return
        self.outcomes[key] = replace(r, attempts=attempts)
        self._tick(a.key)

    def _retry_or_fail(self, key: str, wk: str, why: str) -> None:
        o = self.outcomes[(wk, key)]
        o.error = why
        if o.attempts < self.max_attempts:
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
        if self.init_failures[a.key] >= self.max_attempts:
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
        if not self.progress:
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


