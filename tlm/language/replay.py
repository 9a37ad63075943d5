"""Incremental replay of a sketch: pause at each choice, read the live schedule, continue.

Constrained decoding needs, at every decision, the *live* facts: the extent of the loop a
tile splits (it may depend on earlier decisions) and the loops a block may be computed at
(unit loops are skipped, so they depend on earlier tiles). Re-applying the trace prefix for
every token would cost O(trace) per step. Instead :class:`LiveReplay` runs MetaSchedule's
own ``Trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=...)`` in a worker
thread; the provider *blocks* at each choice until the caller hands it a decision, so the
replay advances exactly one segment per decision (the instructions between two choices).
Only TVM's own replay is used, so what the caller sees is what TVM will build.

Most CPU sketches need none of it: when every tile splits a loop the block had before any
instruction reshaped the loop nest (its extent is the iterator's, whatever the decisions) and no
compute location is chosen, every domain is known from the sketch alone, and
:class:`StaticReplay` walks the choices without running TVM (``static_domains`` says when; the
proof at the end, ``tlm.language.program.apply_sentence``, replays the whole trace once). On a
2-core Zen 3 the live replays were ~30% of ranked generation (cProfile, MobileNetV2's heaviest tasks).

Compute locations come from TVM itself: ``SampleComputeLocation`` with a decision ``d``
keeps ``d`` when legal and otherwise falls back to the largest legal index below it, so
probing ``d = inf, c0-1, c1-1, ...`` (and ``-2`` for inline) lists exactly the candidates of
``CollectComputeLocation``; each probe's instruction is popped from the trace again.
"""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any

from collectors.sketches import probe_compute_location

logger = logging.getLogger(__name__)

_PROBE_MAX = 1 << 30


def compute_locations(sch: Any, block_rv: Any) -> list[int]:
    """Legal ``SampleComputeLocation`` decisions for ``block_rv`` now: -2 inline, -1 root, loops."""
    found: list[int] = []
    d = _PROBE_MAX
    while True:
        got = probe_compute_location(sch, block_rv, d)
        if got < 0:
            break
        found.append(got)
        if got == 0:  # nothing below 0 but root (always legal) and inline (probed next)
            break
        d = got - 1
    found.append(-1)
    if probe_compute_location(sch, block_rv, -2) == -2:
        found.append(-2)
    return sorted(found)


#: Compute-location candidates by (space key, sketch, instruction, which earlier tile factors
#: are 1, earlier locations): these fix which loops exist, which are unit loops (skipped by
#: CollectComputeLocation) and where blocks are attached, so the candidates are a function of
#: the key (checked against fresh probes in tests/tlm/test_constrained.py). Probing costs one TVM CollectComputeLocation
#: per candidate, the most expensive step of constrained decoding; the cache amortises it.
_LOCATION_CACHE: dict[tuple, tuple[int, ...]] = {}
_LOCATION_CACHE_SIZE = 200_000


def cached_locations(key: tuple) -> tuple[int, ...] | None:
    """The compute-location candidates cached under ``key``, or None (tests compare them with
    fresh probes)."""
    return _LOCATION_CACHE.get(key)


def clear_location_cache() -> None:
    """Forget every cached compute-location candidate set (benchmarks measure a cold cache)."""
    _LOCATION_CACHE.clear()


@dataclass
class Domain:
    """The live domain of one choice: what a decision may be right now."""

    extent: int = 0  # tile/ptile: the loop's extent
    sch: Any = None  # at: the live schedule (paused), for probing
    block_rv: Any = None  # at: the block whose location is chosen
    key: tuple | None = None  # at: cache key of its candidates

    @property
    def locations(self) -> tuple[int, ...]:
        """Legal compute locations (probed once per key, then cached)."""
        locs = _LOCATION_CACHE.get(self.key) if self.key is not None else None
        if locs is None:
            locs = tuple(compute_locations(self.sch, self.block_rv))
            if self.key is not None:
                if len(_LOCATION_CACHE) >= _LOCATION_CACHE_SIZE:
                    _LOCATION_CACHE.clear()
                _LOCATION_CACHE[self.key] = locs
        return locs

    def allows_location(self, loc: int) -> bool:
        """Whether ``loc`` is a legal location: one probe, unless the full set is known."""
        locs = _LOCATION_CACHE.get(self.key) if self.key is not None else None
        if locs is not None:
            return loc in locs
        return probe_compute_location(self.sch, self.block_rv, loc) == loc


class ReplayAborted(Exception):
    """Raised inside the worker when the replay is closed before it finished."""


class _Workers:
    """Threads that run replays, kept for the next replay once theirs has finished.

    A replay blocks its thread for the life of its sentence, so there is one thread per live
    replay; starting a thread costs ~1.5 ms on a busy 2-core machine, once per sentence, so
    finished threads wait for the next job instead of exiting.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, job: Any) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._loop, name="tlm-replay", daemon=True).start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except BaseException:  # noqa: BLE001 - a job reports its own errors
                logger.exception("replay worker job failed")
            with self._lock:
                self._idle += 1


_WORKERS = _Workers()


class LiveReplay:
    """Replays one sketch on a fresh schedule, pausing before each of its choices.

    ``next()`` returns ``(choice, domain)`` for the next choice or ``None`` at the end;
    ``decide(value)`` supplies the decision (tile: list of factors, pick: candidate index,
    at: location, parallel: ignored here, the language puts it into the trace) and runs on
    to the next choice. ``close()`` (or garbage collection) stops the worker.
    """

    def __init__(self, sketch: Any, mod: Any, cache_key: tuple | None = None) -> None:
        from tvm.s_tir.schedule import Schedule, Trace

        self.sketch = sketch
        self.sch = Schedule(mod)
        self._choices = {c.inst_index: c for c in sketch.choices}
        self._trace = Trace(sketch.trace.insts, {})
        self._to_worker: queue.SimpleQueue = queue.SimpleQueue()
        self._to_main: queue.SimpleQueue = queue.SimpleQueue()
        self._counter = 0
        self._key = cache_key
        self._given: list[tuple[int, Any]] = []  # (instruction, decision) of tiles/locations
        self._pending: tuple | None = None
        self._finished = False
        self._error: BaseException | None = None
        self._running = True  # the worker has not returned yet
        _WORKERS.submit(self._run)
        self._receive()

    # -- main side -------------------------------------------------------------------------
    def current(self) -> tuple | None:
        """The choice the replay is paused at, with its domain; None when finished."""
        if self._error is not None:
            raise self._error
        return self._pending

    def decide(self, value: Any) -> tuple | None:
        """Hand the decision for the current choice; returns the next ``(choice, domain)``."""
        if self._pending is None:
            raise RuntimeError("replay is not paused at a choice")
        self._to_worker.put(("decide", value))
        self._receive()
        return self.current()

    @property
    def finished(self) -> bool:
        return self._finished

    def close(self) -> None:
        if self._pending is not None and self._running:
            self._pending = None
            self._to_worker.put(("abort", None))

    def __del__(self) -> None:  # never leave a worker blocked forever
        try:
            self.close()
        except Exception:
            pass

    def _receive(self) -> None:
        msg, payload = self._to_main.get()
        if msg == "choice":
            self._pending = payload
        elif msg == "done":
            self._pending = None
            self._finished = True
        else:
            self._pending = None
            self._error = payload

    # -- worker side -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._trace.apply_to_schedule(self.sch, True, self._provider)
        except ReplayAborted:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            if "ReplayAborted" in str(exc):
                return
            self._to_main.put(("error", exc))
            return
        finally:
            self._running = False
        self._to_main.put(("done", None))

    def _provider(self, inst: Any, inputs: Any, attrs: Any, decision: Any) -> Any:
        i = self._counter
        self._counter += 1
        choice = self._choices.get(i)
        if choice is None:
            return decision
        if choice.kind in ("tile", "ptile"):
            ext = self.sch.get(inputs[0]).extent
            if not hasattr(ext, "value"):
                raise ValueError(f"instruction {i}: loop extent {ext} is not a constant")
            domain = Domain(extent=int(ext.value))
        elif choice.kind == "at":
            key = None
            if self._key is not None:
                key = (self._key, self.sketch.sketch_id, i, tuple(self._given))
            domain = Domain(sch=self.sch, block_rv=inputs[0], key=key)
        else:
            domain = Domain()
        self._to_main.put(("choice", (choice, domain)))
        msg, value = self._to_worker.get()
        if msg == "abort":
            raise ReplayAborted()
        if choice.kind == "parallel":
            return decision
        if choice.kind in ("tile", "ptile", "at"):
            # Only which factors are 1 matters for compute locations (unit loops are skipped;
            # CanComputeAt depends on the loop structure, not on extents): keying the cache on
            # the unit pattern lets walks with other factors reuse the probed candidates.
            self._given.append((i, tuple(int(v) == 1 for v in value) if isinstance(value, list) else value))
        return value


def static_domains(sketch: Any, hardware_kind: str = "cpu") -> bool:
    """Whether every choice's domain is known without replaying: on a CPU, no compute location
    is chosen and every tile splits a loop some ``GetLoops`` returned before the first instruction
    that reshapes the nest (a split, a fusion, a compute-at, a cache stage), so its extent is the
    block iterator's. Kept on the sketch."""
    if hardware_kind != "cpu" or getattr(sketch, "thread_groups", ()):
        return False
    known = sketch.__dict__.get("_static_domains")
    if known is None:
        known = sketch.__dict__["_static_domains"] = _static(sketch)
    return known


def _static(sketch: Any) -> bool:
    if any(c.kind == "at" or (c.kind in ("tile", "ptile") and c.extent is None) for c in sketch.choices):
        return False
    return all(c.inst_index in sketch.own_tiles for c in sketch.choices if c.kind in ("tile", "ptile"))


class StaticReplay:
    """:class:`LiveReplay`'s interface for a sketch whose domains are static (:func:`static_domains`):
    the choices in trace order, each tile's domain its static extent; no schedule, no thread."""

    def __init__(self, sketch: Any) -> None:
        self.sketch = sketch
        order = sorted(sketch.choices, key=lambda c: c.inst_index)
        self._steps = [(c, Domain(extent=c.extent) if c.kind in ("tile", "ptile") else Domain()) for c in order]
        self._i = 0

    def current(self) -> tuple | None:
        return self._steps[self._i] if self._i < len(self._steps) else None

    def decide(self, value: Any) -> tuple | None:
        if self._i >= len(self._steps):
            raise RuntimeError("replay is not paused at a choice")
        self._i += 1
        return self.current()

    @property
    def finished(self) -> bool:
        return self._i >= len(self._steps)

    def close(self) -> None:
        pass
