"""A MetaSchedule builder whose worker pool lives across batches and tasks.

TVM's ``LocalBuilder`` starts a fresh process pool for every ``build()`` call (one batch), and
every fresh worker pays its imports again: ~1-2 s per batch with the light tensor intrinsics,
~16 s without them (docs/STACK.md). Its artifacts are ``.tar`` files that the *runner* then
links with the system C compiler, serially, inside the exclusive measurement slot.

:class:`PoolBuilder` is the same builder through MetaSchedule's own extension point
(``PyBuilder``) with two changes: the pool is started once per process and reused by every
batch of every task (workers are recycled after ``max_uses`` builds, which bounds the memory
growth LocalBuilder restarts its pool to avoid), and each candidate is exported as a linked
shared library (``.so``) by the worker that compiled it, so linking runs in parallel with the
other builds and the runner only ``dlopen``s. A failed or timed-out build is a
``BuilderResult`` error (data), exactly as with LocalBuilder.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any, Callable

from collectors.pools import PoolRegistry

logger = logging.getLogger(__name__)

#: Builds per worker process before it is replaced (bounds TVM's per-build memory growth).
MAX_USES = 256


def build_one(mod: Any, target: Any, out_dir: str) -> str:
    """Compile one candidate exactly as MetaSchedule's ``default_build`` does, and export it as a
    shared library in a directory of its own under ``out_dir`` (MetaSchedule's
    RemoveBuildArtifact callback removes the artifact's whole directory); returns its path.
    The layout rewrites the removed blocks performed are stored beside it
    (collectors/layout.py): the runner hands the function its inputs in those layouts.
    Runs in a builder worker."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from collectors import layout

    rewrites = layout.layout_rewrites(mod)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    rt_mod = tvm_build(mod, target=target)
    artifact_dir = tempfile.mkdtemp(dir=out_dir)
    path = os.path.join(artifact_dir, "candidate.so")
    rt_mod.export_library(path)
    layout.save(rewrites, artifact_dir)
    return path


class _Pool:
    """One PopenPoolExecutor and its artifact directory, shared by every builder made with the
    same settings in this process (:data:`_POOLS`)."""

    def __init__(self, workers: int, timeout_s: float, initializer: Callable[[], None] | None) -> None:
        from tvm.support.popen_pool import PopenPoolExecutor

        self.executor = PopenPoolExecutor(max_workers=workers, timeout=timeout_s, initializer=initializer,
                                          maximum_process_uses=MAX_USES)
        self.out_dir = tempfile.mkdtemp(prefix="tlm-build-")

    def stop(self) -> None:
        self.executor.shutdown(wait=True)
        shutil.rmtree(self.out_dir, ignore_errors=True)


_POOLS: PoolRegistry[_Pool] = PoolRegistry("builder", _Pool, _Pool.stop)


def shutdown_builders() -> None:
    """Stop every builder worker of this process (also done at interpreter exit)."""
    _POOLS.shutdown()


def make_pool_builder(*, max_workers: int, timeout_s: float = 30.0,
                      initializer: Callable[[], None] | None = None) -> Any:
    """A :class:`PoolBuilder` (a ``tvm.s_tir.meta_schedule.builder.PyBuilder``): ``max_workers``
    parallel builds, each killed after ``timeout_s``, workers started with ``initializer``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
    from tvm.support.popen_pool import StatusKind

    @derived_object
    class PoolBuilder(PyBuilder):
        """MetaSchedule's builder protocol over a pool that outlives the batch."""

        def __init__(self) -> None:
            super().__init__()
            self.timeout_s = timeout_s

        def build(self, build_inputs: list) -> list:
            pool = _POOLS.get(max_workers, float(timeout_s), initializer)
            results = []
            jobs = [(b.mod, b.target, pool.out_dir) for b in build_inputs]
            for res in pool.executor.map_with_error_catching(lambda job: build_one(*job), jobs):
                if res.status == StatusKind.COMPLETE:
                    results.append(BuilderResult(res.value, None))
                elif res.status == StatusKind.TIMEOUT:
                    results.append(BuilderResult(None, f"PoolBuilder: timeout, killed after {timeout_s} seconds"))
                else:
                    results.append(BuilderResult(None, f"PoolBuilder: an exception occurred\n{res.value}"))
            return results

    return PoolBuilder()
