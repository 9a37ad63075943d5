"""Worker pools that outlive a batch: one per settings in a process, stopped at exit.

The builder (:mod:`collectors.builder`) and the runner (:mod:`collectors.runner`) both keep
their worker processes across batches and tasks, since a fresh worker pays TVM's imports again.
A :class:`PoolRegistry` is that bookkeeping, once: a pool is made the first time its settings
are asked for, handed out again after, and stopped (every worker with it) by ``shutdown()`` or
at interpreter exit, so no worker is left behind.
"""
from __future__ import annotations

import atexit
import logging
import threading
from typing import Callable, Generic, Hashable, TypeVar

logger = logging.getLogger(__name__)

P = TypeVar("P")


class PoolRegistry(Generic[P]):
    """Pools of one kind by their settings (thread-safe)."""

    def __init__(self, kind: str, make: Callable[..., P], stop: Callable[[P], None]) -> None:
        self.kind, self._make, self._stop = kind, make, stop
        self._lock = threading.Lock()
        self._pools: dict[tuple, P] = {}
        atexit.register(self.shutdown)

    def get(self, *settings: Hashable) -> P:
        """The pool of these settings (``make(*settings)`` the first time)."""
        with self._lock:
            pool = self._pools.get(settings)
            if pool is None:
                pool = self._pools[settings] = self._make(*settings)
                logger.debug("started a %s pool %s", self.kind, settings)
            return pool

    def shutdown(self) -> None:
        """Stop every pool (the next ``get`` starts a fresh one)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            self._stop(pool)
