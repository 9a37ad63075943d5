"""TVM's thread pool of this process: as many threads as the hardware key has cores.

Why this exists: TVM's pool reads ``TVM_NUM_THREADS`` once, when it first starts, else
``OMP_NUM_THREADS`` (Ray sets it to 1 in its workers), else half the cores on x86. On a 2-core
Zen 3 the default is one thread, and a parallel region then costs ~9 us where it costs ~1.5 us
on the key's two threads (a 64-element loop timed both ways). A schedule measured on N threads
and run on fewer is a different program: the demo's small BERT ran 0.109 ms from served
schedules timed on the default pool and 0.046 ms on the key's cores. So every process that
measures candidates (a runner worker, a collector actor) or runs a whole model (the demo,
``tlm compile``, the benchmarks) starts the pool on the key's cores.

What a parallel region costs also decides when a program should have one
(:func:`parallel_target`): the rule scheduler (``collectors.rules``) and healthy decoding
(``tlm.language.health``) write a task whose work is less than that serial, and split a large
one enough ways to balance the cores.
"""
from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def pin_tvm_threads(cores: int) -> None:
    """Pin TVM's thread pool of this process to ``cores`` threads. Call it before the pool first
    starts (a runner worker's initializer, a collector actor's constructor): only that start
    reads it."""
    os.environ["TVM_NUM_THREADS"] = str(int(cores))


def run_on_cores(cores: int) -> int:
    """Start (or find) this process's TVM pool on ``cores`` threads, unless the user chose a count
    with ``TVM_NUM_THREADS``; returns the pool's threads. A pool that had already started on
    another count cannot be changed: that is logged, since its timings are not the key's."""
    from tvm.runtime import num_threads

    os.environ.setdefault("TVM_NUM_THREADS", str(int(cores)))
    n = int(num_threads())
    if n != int(cores):
        log.warning("TVM's thread pool of this process runs %d threads, the hardware key has %d cores: "
                    "timings here are not what its measurements saw (TVM_NUM_THREADS=%s)",
                    n, cores, os.environ.get("TVM_NUM_THREADS"))
    return n


#: seconds one parallel region costs to start and join: 1.3-2.2 us for a 64-element loop on a
#: 2-core Zen 3 with TVM's pool on both cores (a ``T.parallel(2)`` loop timed against ``T.serial(2)``)
PARALLEL_REGION_S = 2e-6
#: one core's rates on small tasks, for the one-core time estimate: TVM's default (serial)
#: lowering ran the demo models' 50-200 KFLOP matmuls and convolutions at 30-45 GFLOP/s on the
#: Zen 3 (``bench/results/task_times-*-small.json``; 12 GFLOP/s, the corpus's best one-core
#: programs of 1-5 KFLOP convolutions, left 50-200 KFLOP tasks parallel and 1.5-2x slower than
#: the default); a copy streams ~15 GB/s
SERIAL_FLOPS_PER_S = 30e9
SERIAL_BYTES_PER_S = 15e9
#: how many ways a large task's parallel loop splits at least, per core: 2 on 2 cores leaves at
#: most a third of a core idle (3 chunks on 2 cores); more constrained the tiles for no measured gain
WAYS_PER_CORE = 2


def one_core_seconds(flops: float, nbytes: int) -> float:
    """Estimated seconds of one run of a task on one core (:data:`SERIAL_FLOPS_PER_S`,
    :data:`SERIAL_BYTES_PER_S`)."""
    return flops / SERIAL_FLOPS_PER_S + nbytes / SERIAL_BYTES_PER_S


def parallel_target(flops: float, nbytes: int, cores: int) -> int:
    """How parallel a task's program should be on ``cores``: 0 no opinion (one core), 1 serial
    (what splitting saves, ``t x (1 - 1/cores)``, is under one region's cost), else the least
    parallel extent worth having: ``WAYS_PER_CORE x cores``, fewer when the chunks would be
    shorter than two regions' cost."""
    return target_of_seconds(one_core_seconds(flops, nbytes), cores)


def target_of_seconds(t: float, cores: int) -> int:
    """:func:`parallel_target` of a task whose one-core time is ``t`` seconds."""
    if cores < 2:
        return 0
    if t * (1 - 1 / cores) < PARALLEL_REGION_S:
        return 1
    return max(2, min(WAYS_PER_CORE * cores, int(t / (2 * PARALLEL_REGION_S))))


def task_one_core_seconds(task: Any) -> float:
    """:func:`one_core_seconds` of a task (its FLOPs, estimated when the task has none recorded)."""
    from collectors.tasks import estimate_flops
    from collectors.tir import io_bytes

    flops = float(getattr(task, "flops", 0.0) or 0.0) or estimate_flops(task.mod)
    return one_core_seconds(flops, io_bytes(task.mod))


def task_parallel_target(task: Any, hardware: Any) -> int:
    """:func:`parallel_target` of a task on ``hardware``."""
    return target_of_seconds(task_one_core_seconds(task), int(getattr(hardware, "cores", 1) or 1))
