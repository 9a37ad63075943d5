"""What every benchmark shares, defined once: a percentile, a geometric mean, the machine.

So that "p95" means the same in every result file, a ratio's geomean is taken the same way,
and every file says alike which machine (and how loaded) it was measured on.
"""
from __future__ import annotations

import json
import math
import os
import platform
from typing import Any, Callable, Iterable


def percentile(xs: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank: the smallest value with at least ``q``% of
    the values at or below it (so p50 of 4 values is the 2nd, p99 of 100 is the 99th). Raises
    ``ValueError`` on no values."""
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def geomean(xs: Iterable[float | None]) -> float | None:
    """Geometric mean of the values that are there (None and 0 are left out: a method with no
    result on a task); None when none are."""
    vals = [x for x in xs if x]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def speed_over(rows: Iterable[dict], method: str, baseline: str) -> float | None:
    """Geomean over the rows (each with ``latency_s``: method -> seconds) that timed both of
    ``baseline``'s latency / ``method``'s: above 1, ``method`` is the faster."""
    return geomean([r["latency_s"][baseline] / r["latency_s"][method] for r in rows
                    if method in r["latency_s"] and baseline in r["latency_s"]])


def failed_measurements(rows: Iterable[dict]) -> dict[str, int]:
    """Per method, the rows whose programs timed no correct latency (``errors``, as
    ``bench.learning._judged`` keeps them): what every :func:`speed_over` of it leaves out."""
    out: dict[str, int] = {}
    for r in rows:
        for m in r.get("errors", {}):
            out[m] = out.get(m, 0) + 1
    return out


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it ("" where it does not)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


#: The repository root (this file is <root>/bench/_common.py).
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: where every benchmark and study writes its results (JSON, Markdown, PNG)
RESULTS = os.path.join(REPO, "bench", "results")


def shipped_path(path: str | os.PathLike) -> str:
    """How a result file names a path: relative to the repository when it is inside it, else
    only its last part (a result file is shipped; a path of the measuring machine means nothing
    on another one)."""
    full = os.path.abspath(path)
    if os.path.commonpath([full, REPO]) == REPO:
        return os.path.relpath(full, REPO)
    return f"(outside the repository) {os.path.basename(full)}"


def write_noted(res: dict, out: str, markdown: Callable[[dict], str], note: str | None) -> str:
    """Write ``res`` (with ``note``, a paragraph on what limits the figures) as JSON to ``out``
    and its Markdown beside it (``.md``); returns the Markdown."""
    if note:
        res["note"] = note
    with open(out, "w") as fh:
        json.dump(res, fh, indent=2)
    md = markdown(res) + (f"\n{note}\n" if note else "")
    with open(os.path.splitext(out)[0] + ".md", "w") as fh:
        fh.write(md)
    return md


def machine(hardware: Any = None, **extra: Any) -> dict:
    """The machine a result was measured on: CPU model, cores, memory, OS, Python, the load
    average when the call was made and, given a ``collectors.hardware.Hardware``, its key and
    description. ``extra`` adds what one benchmark needs beside (library versions, ...)."""
    out: dict[str, Any] = {
        "cpu": cpu_model(), "cpus": os.cpu_count(),
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(), "python": platform.python_version(),
        "load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }
    if hardware is not None:
        out |= {"hardware_key": hardware.key, "hardware": hardware.description}
    return out | extra


def matmul_task(n: int, m: int, k: int, name: str | None = None) -> Any:
    """A ``collectors.tasks.Task`` of C[n, m] = A[n, k] @ B[k, m] in float32: the synthetic
    workload the collection benchmarks time the machinery on (a zoo task would time the model)."""
    import tvm
    from tvm import te

    from collectors.tasks import Task
    from collectors.tir import workload_key

    a, b = te.placeholder((n, k), name="A"), te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    return Task(workload_key(mod), name or f"matmul_{n}x{m}x{k}", mod, flops=2.0 * n * m * k, op_kind="matmul")


def refuse_beside_measuring(what: str) -> None:
    """Exit (code 2, one line) when another job measures on this host: a benchmark's timings
    beside it are noise, and it poisons the other's (collectors/host_load.py)."""
    import sys

    from collectors.host_load import BusyHost
    from collectors.host_load import refuse_beside_measuring as refuse

    try:
        refuse(what)
    except BusyHost as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
