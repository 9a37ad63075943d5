"""The host's load beside a measurement, and the rule that nothing is timed beside a busy core.

Why this exists: on a 2-core machine one other busy process turns a timing into noise. A
layernorm-like subgraph (four parallel regions) measured 59 us for the rule baseline on a quiet
machine and 10,649 us while one other process kept a core busy (180x); a search kept a lucky
119 us timing of a schedule that re-measured at 12 ms a moment later, both beside the same busy
core (issue 32). A search keeps its luckiest timings, so such records poison the corpus, and a
benchmark run beside a collection poisons its figures.

What it does:

- :class:`LoadMeter` measures what *other* processes took of the CPU over a window: the
  system-wide busy time of ``/proc/stat`` (user, nice, system, irq, softirq and the hypervisor's
  steal) minus this process's own CPU time, in cores (1.0 = one core busy the whole window).
  The runner worker wraps every candidate's timed runs in one (collectors/runner.py); the value
  is stored with the record (``host_load``).
- :class:`QuietHost` is the policy: a candidate timed beside more than ``max_other_cores`` is
  redone once the host is quiet again (waiting up to ``wait_s``), and after ``redo`` redos it is
  stored as an error (``busy host: ...``), never as a latency. ``TLM_BUSY_HOST=record`` keeps
  the figure but acts on nothing (the test suite, whose two workers measure side by side and
  whose timings mean nothing); ``TLM_BUSY_WAIT_S`` sets the wait (a background campaign sets
  it long, so it pauses while someone else measures).
- :func:`measuring_job` registers a process as measuring for as long as it tunes or judges
  (one small file per process under the temp dir, identified as ``storage.runs`` identifies a
  run's driver: host, pid and start, so a reused pid is not mistaken for it), and :func:`other_measuring_jobs` lists the live ones of other processes: a
  benchmark refuses to judge beside them (bench/_common.py). A stopped process (SIGSTOP, ``T``)
  takes no CPU and is not counted.

Resolution: ``/proc/stat`` counts in 10 ms ticks, so a 60 ms measurement reads others' load to
about a sixth of a core; the default limit (half a core) sits well above that and well below a
busy core (about 1.0). Where ``/proc/stat`` is missing (not Linux) the load is unknown (None)
and nothing is refused.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from storage.runs import driver_alive, process_stat, this_driver

logger = logging.getLogger(__name__)
T = TypeVar("T")

_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
#: /proc/stat's cpu columns that are time something ran: user nice system [idle iowait] irq softirq steal
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


def _busy_s() -> float | None:
    """CPU seconds the whole host has been busy since boot, or None where unknown."""
    try:
        with open("/proc/stat") as f:
            cols = f.readline().split()[1:]
    except OSError:
        return None
    return sum(int(cols[i]) for i in _BUSY_COLUMNS if i < len(cols)) * _TICK_S


class LoadMeter:
    """Others' CPU over a window: ``LoadMeter()`` starts it, :meth:`other_cores` reads it."""

    def __init__(self) -> None:
        self._busy0 = _busy_s()
        self._own0 = time.process_time()
        self._t0 = time.perf_counter()

    def own_cores(self) -> float:
        """Average cores this process (every thread of it) ran on since the start: far below one
        when it was stopped (SIGSTOP) or starved while timing, which its own timings include."""
        wall = time.perf_counter() - self._t0
        return round((time.process_time() - self._own0) / wall, 3) if wall > 0 else 0.0

    def other_cores(self) -> float | None:
        """Average cores that other processes (and the hypervisor's steal) kept busy since the
        start, or None where the host's CPU time cannot be read."""
        busy = _busy_s()
        wall = time.perf_counter() - self._t0
        if busy is None or self._busy0 is None or wall <= 0:
            return None
        others = (busy - self._busy0) - (time.process_time() - self._own0)
        return round(max(0.0, others) / wall, 3)


def sample_load(window_s: float = 0.5) -> float | None:
    """Others' load over the next ``window_s`` seconds (this process sleeps through it)."""
    meter = LoadMeter()
    time.sleep(window_s)
    return meter.other_cores()


@dataclass(frozen=True)
class QuietHost:
    """When a measurement counts: taken beside at most ``max_other_cores`` of others' CPU."""

    max_other_cores: float = 0.5  # half a core: above the /proc/stat resolution, below a busy core
    min_own_cores: float = 0.5  # the measuring process ran less than this: stopped or starved
    redo: int = 2  # times a busy candidate is measured again before it is stored as an error
    wait_s: float = 60.0  # how long to wait for a quiet host before each redo
    act: bool = True  # False: record the load, never redo or refuse (TLM_BUSY_HOST=record)

    @classmethod
    def from_env(cls) -> "QuietHost":
        """The policy of this process: ``TLM_BUSY_HOST`` (``redo``, the default, or ``record``)
        and ``TLM_BUSY_WAIT_S``."""
        mode = os.environ.get("TLM_BUSY_HOST", "redo").strip().lower()
        if mode not in ("redo", "record"):
            raise ValueError(f"TLM_BUSY_HOST={mode!r}: expected 'redo' or 'record'")
        wait = os.environ.get("TLM_BUSY_WAIT_S")
        try:
            wait_s = float(wait) if wait else cls.wait_s
        except ValueError:
            raise ValueError(f"TLM_BUSY_WAIT_S={wait!r}: expected seconds") from None
        return cls(wait_s=wait_s, act=mode == "redo")

    def busy(self, load: float | None, own: float | None = None) -> bool:
        """Whether a measurement taken beside ``load`` (others' cores), while the measuring
        process ran on ``own`` cores, must not be kept as it is."""
        if not self.act:
            return False
        return (load is not None and load > self.max_other_cores) or (own is not None and own < self.min_own_cores)

    def wait_until_quiet(self, window_s: float = 0.5) -> float | None:
        """Sample the host until a window is quiet or ``wait_s`` has passed; the last load seen."""
        deadline = time.monotonic() + self.wait_s
        while True:
            load = sample_load(window_s)
            if not self.busy(load) or time.monotonic() >= deadline:
                return load


#: A timing shorter than this (PyTorch's microsecond calls) reads the host's load over this long
#: right after it: /proc/stat counts in 10 ms ticks, so a shorter window reads nothing.
MIN_WINDOW_S = 0.1


def redo_while_busy(attempt: Callable[[], tuple[T, float | None, float | None]], policy: QuietHost,
                    what: str = "a candidate") -> tuple[T | None, float | None, str | None]:
    """The policy's rule for one measurement: ``attempt()`` gives ``(value, others' load, own
    cores)``; a value timed beside a busy host is measured again once the host is quiet, and after
    ``policy.redo`` redos it is an error. Returns ``(value, load, None)`` or ``(None, load, error)``.
    The runner's candidates and the timings a judge makes in its own process share it."""
    load: float | None = None
    own: float | None = None
    for n in range(policy.redo + 1):
        value, load, own = attempt()
        if not policy.busy(load, own):
            return value, load, None
        if n < policy.redo:
            logger.info("%s was timed beside %s busy cores of other processes, on %.2f of its own: "
                        "measured again once the host is quiet", what, load, own or 0.0)
            policy.wait_until_quiet()
    return None, load, busy_error(load, own, policy)


def time_on_quiet_host(measure: Callable[[], float],
                       policy: QuietHost | None = None) -> tuple[float | None, float | None, str | None]:
    """``(measure()'s value, others' load, None)`` taken on a quiet host, or ``(None, load, error)``
    (:func:`redo_while_busy`).

    For timings made in this process rather than in the runner's worker (PyTorch eager beside the
    schedules a judge measures). A judge's eager figure once read 19.3 ms against 2.9 ms the run
    before, taken beside a dataset build (ViT's ``fused_matmul4_add3``, Emerald Rapids)."""

    def attempt() -> tuple[float, float | None, float]:
        meter = LoadMeter()
        t0 = time.perf_counter()
        value = measure()
        load, own = meter.other_cores(), meter.own_cores()
        if time.perf_counter() - t0 < MIN_WINDOW_S and load is not None:  # under /proc/stat's resolution
            load = max(load, sample_load(MIN_WINDOW_S) or 0.0)
        return value, load, own

    return redo_while_busy(attempt, policy or QuietHost.from_env(), "PyTorch's timing")


def busy_error(load: float | None, own: float | None, policy: QuietHost) -> str:
    """The error stored for a candidate that was never timed on a quiet host."""
    if load is not None and load > policy.max_other_cores:
        why = f"other processes kept {load:.2f} cores busy while it was timed (limit {policy.max_other_cores})"
    else:
        why = f"the measuring process ran on {own or 0:.2f} cores while it was timed (stopped or starved)"
    return f"busy host: {why}; measured {policy.redo + 1} times"


# -- who is measuring on this host ------------------------------------------------------------

def _jobs_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"tlm-measuring-{os.getuid() if hasattr(os, 'getuid') else 0}")


_DEPTH = 0


@contextlib.contextmanager
def measuring_job(what: str) -> Iterator[None]:
    """Say, for the duration, that this process measures on this host (``what``: a line for
    whoever is refused because of it). Nested uses keep one entry."""
    global _DEPTH
    path = os.path.join(_jobs_dir(), f"{os.getpid()}.json")
    if _DEPTH == 0:
        entry = {**this_driver(), "what": what, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w") as f:
                json.dump(entry, f)
            os.replace(path + ".tmp", path)
        except OSError:
            pass  # a read-only temp dir: measure anyway, unannounced
    _DEPTH += 1
    try:
        yield
    finally:
        _DEPTH -= 1
        if _DEPTH == 0:
            with contextlib.suppress(OSError):
                os.remove(path)


def measuring_on_this_host() -> bool:
    """Whether this process measures now or another live process on this host does."""
    return _DEPTH > 0 or bool(other_measuring_jobs())


def other_measuring_jobs() -> list[dict]:
    """The live measuring jobs of other processes on this host (stale entries are removed)."""
    out = []
    try:
        names = os.listdir(_jobs_dir())
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(_jobs_dir(), name)
        try:
            with open(path) as f:
                entry = json.load(f)
            pid = int(entry["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid == os.getpid():
            continue
        if driver_alive(entry) is False:  # the process, as storage.runs identifies one, is gone
            with contextlib.suppress(OSError):
                os.remove(path)
            continue
        stat = process_stat(pid)
        if stat is not None and stat[0] != "T":  # a stopped job takes no CPU
            out.append(entry)
    return out


class BusyHost(RuntimeError):
    """Another process measures on this host: judging beside it would time noise."""


def refuse_beside_measuring(what: str = "judge") -> None:
    """Raise :class:`BusyHost` naming the other measuring jobs of this host, if any (unless this
    process's policy only records: ``TLM_BUSY_HOST=record``)."""
    if not QuietHost.from_env().act:
        return
    jobs = other_measuring_jobs()
    if jobs:
        names = "; ".join(f"pid {j['pid']}: {j.get('what', '?')} (since {j.get('since', '?')})" for j in jobs[:3])
        raise BusyHost(f"will not {what} while another job measures on this host ({names}): its timings "
                       f"and ours would both be noise. Wait for it, stop it (kill -STOP pauses it), "
                       f"or set TLM_BUSY_HOST=record to measure anyway")
