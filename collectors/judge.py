"""How we judge schedules (docs/ARCHITECTURE.md, "Judging"): every method's schedule of a task measured in
one call, with one evaluator setting, correctness-checked, beside PyTorch eager.

A *method* is a name, the schedules it proposes for the task and the time it took to get them
(generation, search, rules). :func:`judge` builds and runs every distinct schedule of every
method in **one** ``measure_schedules`` call (same builder, runner and reference; 3 runs x 3
repeats, median) and keeps each method's fastest correct one, so no method is judged by a
latency recorded in another process (a tuning-time latency and the same schedule re-timed
differed by up to 1.7x here). The baselines live here too: MetaSchedule's evolutionary search
at several budgets from one run (:func:`search_methods`), the rule scheduler, a random valid
program, and the PyTorch call that reproduces the task's output (:func:`torch_equivalent`,
verified against the reference, not guessed from the name).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from collectors.hardware import Hardware
from collectors.tasks import Task


@dataclass
class Method:
    """One way of getting a schedule for a task."""

    schedules: list  # postprocessed schedules it proposes (its best is kept)
    time_s: float  # what getting them took
    measured: bool = False  # it measures its candidates itself (best-of-k): measurement time is added


@dataclass
class Search:
    """One MetaSchedule run: its methods at each budget and its best-so-far curve."""

    methods: dict[str, Method]
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds into the search, latency) per success
    wall_s: float = 0.0
    traces: dict[str, str] = field(default_factory=dict)  # method name -> trace JSON of its schedule (to cache it)


def search_methods(task: Task, hardware: Hardware, trials: int, budgets: Sequence[int] = (64,), *,
                   seed: int = 0) -> Search:
    """MetaSchedule's evolutionary search, one run of ``trials``: ``ms_<b>`` for each budget
    ``b <= trials`` (the best of its first ``b`` measured candidates, timed to that point) and
    ``ms_<trials>``. A separate ``b``-trial run starts identically, so the prefix stands for it."""
    from collectors.tir import schedule_of
    from collectors.tuner import TuneConfig, tune_task

    records, arrivals = [], []
    t0 = time.perf_counter()

    def keep(batch: list) -> None:
        now = time.perf_counter() - t0
        records.extend(batch)
        arrivals.extend([now] * len(batch))

    # batches end at the budgets, so a budget's time is when its last candidate was measured
    per_iter = min([b for b in budgets if b < trials] + [trials, 64])
    tune_task(task, hardware, TuneConfig(trials=trials, strategy="evolutionary", trials_per_iter=per_iter,
                                               seed=seed),
              on_records=keep)
    wall = time.perf_counter() - t0
    ok = [(r.latency_s, i) for i, r in enumerate(records) if r.latency_s is not None]
    out = Search({}, [(arrivals[i], lat) for lat, i in ok], wall)
    for b in sorted({b for b in budgets if b < trials} | {trials}):
        within = [(lat, i) for lat, i in ok if i < b]
        if not within:
            continue
        i = min(within)[1]
        out.methods[f"ms_{b}"] = Method([schedule_of(task.mod, records[i].trace_json)],
                                        arrivals[min(b, len(records)) - 1] if b < trials else wall)
        out.traces[f"ms_{b}"] = records[i].trace_json
    return out


def rules_method(task: Task, hardware: Hardware) -> Method:
    from collectors.rules import rule_schedule

    r = rule_schedule(task, hardware)
    return Method([r.schedule], r.schedule_s)


def random_method(task: Task, hardware: Hardware, *, seed: int = 1) -> Method:
    """The first random program of the design space (seeds from ``seed``) every postprocessor accepts."""
    from collectors.sketches import design_space, refusing_postproc
    from collectors.tir import as_module
    from tvm.s_tir.schedule import Schedule

    t0 = time.perf_counter()
    for s in range(seed, seed + 50):
        for sk in design_space(as_module(task.mod), hardware, seed=s):
            sch = Schedule(as_module(task.mod))
            sk.trace.apply_to_schedule(sch, remove_postproc=True)
            if refusing_postproc(sch, task, hardware) is None:
                return Method([sch], time.perf_counter() - t0)
    raise RuntimeError(f"{task.task_name}: no random valid program in 50 seeds")


def judge(task: Task, hardware: Hardware, methods: dict[str, Method], *, torch_eager: bool = True) -> dict:
    """Every method's fastest correct latency from one measurement call (module docstring).

    Returns ``{name: {latency_s, time_s, candidates, n_errors, errors}}`` plus ``torch_eager``
    when a verified PyTorch call exists (``call`` names it). Raises ``host_load.BusyHost`` when
    another job measures on this host: side-by-side ratios beside it are noise.
    """
    from collectors.host_load import refuse_beside_measuring
    from collectors.tuner import TuneConfig, measure_schedules

    refuse_beside_measuring("judge")

    flat, owner, seen = [], [], {}
    for name, m in methods.items():
        for s in m.schedules:
            key = s.mod.script()
            if key not in seen:
                seen[key] = len(flat)
                flat.append(s)
            owner.append((name, seen[key]))
    measured: list = []
    t0 = time.perf_counter()
    measure_schedules(task, hardware, flat, tuner="judge", config=TuneConfig(trials=max(1, len(flat)), repeat=3),
                      on_records=measured.extend)
    per_schedule_s = (time.perf_counter() - t0) / max(1, len(flat))
    out: dict[str, dict] = {}
    for name, m in methods.items():
        idx = [j for n, j in owner if n == name]
        lats = [measured[j].latency_s for j in idx if measured[j].latency_s is not None]
        errs = [measured[j].error for j in idx if measured[j].error]
        out[name] = {"latency_s": min(lats) if lats else None, "candidates": len(idx), "n_errors": len(errs),
                     "errors": errs[:3], "time_s": m.time_s + (per_schedule_s * len(idx) if m.measured else 0.0)}
    if torch_eager:
        eager = time_torch_equivalent(task, hardware)
        if eager is not None:
            out["torch_eager"] = eager
    return out


def time_torch_equivalent(task: Task, hardware: Hardware) -> dict | None:
    """PyTorch eager's latency on the task's operator (None when no PyTorch call reproduces it),
    timed on a quiet host as the schedules are (``collectors.host_load.time_on_quiet_host``): beside
    a busy core it is an error, not a latency."""
    import torch

    from collectors.compile import time_torch
    from collectors.correctness import make_reference
    from collectors.host_load import time_on_quiet_host

    ref = make_reference(task.mod)
    fn, desc = torch_equivalent(task.op_kind, ref)
    if fn is None:
        return None
    ins = [torch.from_numpy(a.copy()) for a in ref.inputs[:-1]]
    latency, load, err = time_on_quiet_host(lambda: time_torch(fn, ins, threads=hardware.cores))
    return {"latency_s": latency, "time_s": 0.0, "candidates": 1, "n_errors": int(err is not None),
            "errors": [err] if err else [], "call": desc, "host_load": load}


def torch_equivalent(op_kind: str, ref: Any) -> tuple[Any, str]:
    """``(fn on torch tensors, description)`` reproducing the reference output, or ``(None, reason)``."""
    import torch
    import torch.nn.functional as F

    from collectors.correctness import compare

    ins = [torch.from_numpy(a.copy()) for a in ref.inputs[:-1]]
    expected = ref.outputs[-1]
    cands: list[tuple[str, Any]] = []
    if op_kind == "matmul" and len(ins) >= 2:
        cands += [("a @ b", lambda a, b, *r: a @ b), ("a @ b.T", lambda a, b, *r: a @ b.transpose(-1, -2))]
        if len(ins) == 3:
            cands += [("a @ b + c", lambda a, b, c: a @ b + c),
                      ("a @ b.T + c", lambda a, b, c: a @ b.transpose(-1, -2) + c)]
    elif op_kind == "conv2d" and len(ins) == 2 and ins[0].dim() == 4 and ins[1].dim() == 4:
        groups = {1, int(ins[0].shape[1])}
        for g in sorted(groups):
            for stride in (1, 2):
                for pad in range(0, 4):
                    cands.append((f"conv2d(stride={stride}, padding={pad}, groups={g})",
                                  lambda x, w, s=stride, p=pad, g=g: F.conv2d(x, w, stride=s, padding=p, groups=g)))
    else:
        return None, f"no PyTorch mapping tried for op kind {op_kind!r} with {len(ins)} inputs"
    for desc, fn in cands:
        try:
            with torch.inference_mode():
                got = fn(*ins)
        except RuntimeError:  # a candidate of the wrong shape
            continue
        if tuple(got.shape) == expected.shape and compare([got.numpy()], [expected]) is None:
            return fn, desc
    return None, "no candidate PyTorch call reproduced the task's output"
