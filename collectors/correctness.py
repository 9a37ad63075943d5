"""Correctness of a schedule: its outputs against a reference on random inputs.

The reference is the task's *unscheduled* PrimFunc compiled plainly for the host CPU (llvm):
scheduling must not change what a program computes, so any difference beyond float rounding
is a wrong answer. A reference is made once per task (:func:`make_reference`) and saved as an
``.npz`` file; every measured candidate is then checked once, inside the runner worker right
after it is timed (collectors/runner.py), so a wrong answer comes back as a run error
("wrong answer: max rel err ...") and is never stored as a latency. The same
check runs in-process for a schedule at hand with :func:`check_schedule`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

logger = logging.getLogger(__name__)

#: Prefix of every error message a wrong answer produces (the corpus ``error`` column).
WRONG_ANSWER = "wrong answer"


@dataclass(frozen=True)
class Tolerance:
    """How far a scheduled float output may drift from the reference (reordered reductions)."""

    rtol: float = 1e-3  # relative to the element's reference magnitude
    atol_scale: float = 1e-4  # absolute slack, as a fraction of the output's largest magnitude


@dataclass
class Reference:
    """Inputs for every parameter and the values every parameter holds after a reference run."""

    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    path: str | None = None  # the .npz it was saved to (what runner workers load)

    def save(self, path: str) -> str:
        """Write an .npz; a buffer the reference run left unchanged is stored once (as input)."""
        arrays = {f"in{i}": a for i, a in enumerate(self.inputs)}
        arrays.update({f"out{i}": o for i, (a, o) in enumerate(zip(self.inputs, self.outputs))
                       if o is not a and not np.array_equal(o, a, equal_nan=o.dtype.kind == "f")})
        np.savez(path, **arrays)
        self.path = path if path.endswith(".npz") else path + ".npz"
        return self.path

    @staticmethod
    def load(path: str) -> "Reference":
        with np.load(path) as z:
            n = sum(1 for k in z.files if k.startswith("in"))
            inputs = [z[f"in{i}"] for i in range(n)]
            outputs = [z[f"out{i}"] if f"out{i}" in z.files else inputs[i] for i in range(n)]
            return Reference(inputs, outputs, path)


def random_inputs(params: Sequence[tuple[str, tuple[int, ...]]], *, seed: int = 0) -> list[np.ndarray]:
    """Random values for parameters given as (dtype, shape).

    Floats are uniform in [-1, 1); integers are 0 or 1 and booleans random, so that index
    inputs (gather, embedding take) stay in bounds whatever the table size.
    """
    rng = np.random.default_rng(seed)
    out = []
    for dtype, shape in params:
        dt = np.dtype(dtype) if dtype != "bfloat16" else None
        if dt is None:
            raise ValueError(f"unsupported parameter dtype {dtype!r} for a reference run")
        if dt.kind == "f":
            # drawn in float32 (float64 where asked) and scaled in place: a float64 draw cast down
            # took 4.6 s of a 131M-element weight's reference (LLaMA-7B's LM head), this 0.35 s
            draw = rng.random(shape, dtype=np.float64 if dt == np.float64 else np.float32)
            draw *= 2
            draw -= 1
            out.append(draw if draw.dtype == dt else draw.astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(dt))
        elif dt.kind in "iu":
            out.append(rng.integers(0, 2, size=shape).astype(dt))
        else:
            raise ValueError(f"unsupported parameter dtype {dtype!r} for a reference run")
    return out


def param_specs(mod: Any) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, shape) of each parameter of ``mod``'s ``main`` PrimFunc, in order."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    func = mod["main"] if hasattr(mod, "functions_items") else mod
    specs = []
    for info in ArgInfo.from_prim_func(func):
        kind, dtype, shape = info.as_json()
        if str(kind) != "TENSOR":
            raise ValueError(f"parameter kind {kind!r} is not a tensor")
        specs.append((str(dtype), tuple(int(s) for s in shape)))
    return specs


def make_reference(mod: Any, *, seed: int = 0, path: str | None = None) -> Reference:
    """Run the unscheduled ``mod`` on random inputs (host CPU) and keep all buffers after it.

    Written buffers hold the expected outputs; the others must come back unchanged.
    """
    import tvm

    from collectors.tir import as_module

    mod = as_module(mod)
    inputs = random_inputs(param_specs(mod), seed=seed)
    outputs = _run(tvm.compile(reference_program(mod), target=tvm.target.Target({"kind": "llvm"})), inputs,
                   tvm.cpu(0))
    # Read-only buffers share the input array: half the memory for weight-heavy tasks.
    outputs = [a if np.array_equal(o, a, equal_nan=o.dtype.kind == "f") else o for a, o in zip(inputs, outputs)]
    ref = Reference(inputs, outputs)
    if path is not None:
        ref.save(path)
    return ref


def reference_program(mod: Any) -> Any:
    """The program a reference runs: ``mod``'s own loops, each output element reduced in their
    order, but walked faster.

    Why: the reference of a large task runs the unscheduled loops, and on one core that is
    seconds per task (a BERT matmul: 2.6 s, 12% of a 64-trial tune); LLaMA-7B's LM head took
    192 s, paid by every measurement call of a compile's budget. So the outermost loop of each
    top-level loop nest is made parallel where it is data-parallel (TVM's own check decides), and a
    reduction whose innermost loop strides its buffers (a matmul's k walks B a row per step) is
    summed outside its innermost spatial loop instead (:func:`_spatial_inside`), the spatial loops
    around it fused and split over the cores: 192 -> 6.7 s, the BERT matmul 2.6 -> 0.13 s. Each
    output element is still computed by the same serial code, its reduction in the same order,
    so the values are the serial reference's, bit for bit (tests/collectors/test_correctness.py).
    """
    from tvm.s_tir.schedule import Schedule, ScheduleError

    sch = Schedule(mod)
    try:
        root = sch.get_sblock("root")
    except (ScheduleError, ValueError, RuntimeError):  # no root block: nothing to change
        return mod
    for block in sch.get_child_blocks(root):
        loops = sch.get_loops(block)
        if not loops:
            continue
        order = _spatial_inside(sch, block, loops)
        if order is not None:
            outer, reductions, inner = order
            try:
                sch.reorder(*outer, *reductions, inner)
                sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
                continue
            except ScheduleError:  # left as it was (TVM checks before it changes anything)
                loops = sch.get_loops(block)
        try:
            sch.parallel(loops[0])
        except ScheduleError:  # a reduction or opaque loop: stays serial
            pass
    return sch.mod


def _spatial_inside(sch: Any, block: Any, loops: list) -> tuple[list, list, Any] | None:
    """``(outer spatial loops, reduction loops, innermost spatial loop)`` in the order to run them,
    when ``block``'s innermost loop is a reduction and its innermost spatial loop indexes the last
    dimension of more of its buffers (or as many, over a longer extent); else None. Only for a
    block whose loops are its iterators, one each, in order (an unscheduled program's)."""
    import tvm

    b = sch.get(block)
    iters = list(b.iter_vars)
    extents = [getattr(iv.dom.extent, "value", None) for iv in iters]  # None: symbolic
    if len(iters) != len(loops) or None in extents or any(
            getattr(sch.get(lp).extent, "value", None) != e for lp, e in zip(loops, extents)):
        return None
    kinds = [int(iv.iter_type) for iv in iters]  # 0: data-parallel, 2: reduction
    spatial = [i for i, k in enumerate(kinds) if k == 0]
    reduction = [i for i, k in enumerate(kinds) if k == 2]
    if len(spatial) < 2 or not reduction or len(spatial) + len(reduction) != len(kinds) or reduction[-1] < spatial[-1]:
        return None

    def contiguous(i: int) -> int:
        var = iters[i].var
        return sum(1 for r in list(b.reads) + list(b.writes) if len(r.region)
                   and any(v.same_as(var) for v in tvm.tirx.analysis.undefined_vars(r.region[-1].min)))

    s, r = spatial[-1], reduction[-1]
    ahead = (contiguous(s), extents[s]) > (contiguous(r), extents[r])
    return ([loops[i] for i in spatial[:-1]], [loops[i] for i in reduction], loops[s]) if ahead else None


def _close(g: np.ndarray, e: np.ndarray, tol: Tolerance) -> bool:
    """True when ``g`` is certainly within tolerance of ``e``, decided in the buffers' own
    precision (float32 and wider) without float64 copies: ~1 ms for a 2.4M-element buffer where
    the exact float64 path takes ~58 ms. False means "not decided here": :func:`compare`'s
    exact path then decides and words the error (NaN, inf, integers, float16 all go there)."""
    if np.array_equal(g, e):
        return True
    if e.dtype.kind != "f" or e.dtype.itemsize < 4 or g.dtype != e.dtype or not np.isfinite(e).all():
        return False
    ae = np.abs(e)
    bound = tol.rtol * ae + tol.atol_scale * max(float(ae.max()) if ae.size else 1.0, 1e-30)
    return bool((np.abs(g - e) <= bound).all())


def compare(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], tol: Tolerance = Tolerance()) -> str | None:
    """None when every buffer matches; else "wrong answer: max rel err X (buffer i)"."""
    if len(got) != len(expected):
        return f"{WRONG_ANSWER}: {len(got)} buffers, expected {len(expected)}"
    worst: tuple[float, int] | None = None
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            return f"{WRONG_ANSWER}: buffer {i} has shape {g.shape}, expected {e.shape}"
        if _close(g, e, tol):
            continue
        if e.dtype.kind != "f":
            if not np.array_equal(g, e):
                return f"{WRONG_ANSWER}: buffer {i} ({e.dtype}) differs in {int(np.sum(g != e))} elements"
            continue
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        both_nan = np.isnan(g64) & np.isnan(e64)
        finite_e = np.abs(e64[np.isfinite(e64)])
        scale = float(finite_e.max()) if finite_e.size else 1.0
        diff = np.where(both_nan, 0.0, np.abs(g64 - e64))
        diff = np.where(np.isinf(e64) & (g64 == e64), 0.0, diff)
        bad = diff > tol.rtol * np.abs(e64) + tol.atol_scale * max(scale, 1e-30)
        bad |= np.isnan(diff)
        if bad.any():
            rel = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff)) / max(scale, 1e-30))
            if worst is None or rel > worst[0]:
                worst = (rel, i)
    if worst is not None:
        return f"{WRONG_ANSWER}: max rel err {worst[0]:.3g} (buffer {worst[1]})"
    return None


def check_schedule(sch_or_mod: Any, reference: Reference, target: Any, *, tol: Tolerance = Tolerance()) -> str | None:
    """Compile a schedule (or scheduled IRModule) for ``target``, run it on the reference inputs
    and compare; returns None when correct, else the wrong-answer message.

    ``target`` (a Hardware, a dict or a Target) must run on this host: code for another CPU's
    ISA or for CUDA without a GPU raises ``collectors.hardware.NotRunnableHere`` before it runs.
    """
    import tvm

    from collectors.hardware import check_runs_here
    from collectors.tir import as_target

    check_runs_here(target)
    mod = getattr(sch_or_mod, "mod", sch_or_mod)
    tgt = as_target(target)
    dev = tvm.device("cuda" if tgt.kind.name == "cuda" else "cpu", 0)
    return compare(_run(tvm.compile(mod, target=tgt), reference.inputs, dev), reference.outputs, tol)


def _run(executable: Any, inputs: Sequence[np.ndarray], dev: Any) -> list[np.ndarray]:
    import tvm

    args = [tvm.runtime.tensor(a, device=dev) for a in inputs]
    executable["main"](*args)
    dev.sync()
    return [a.numpy() for a in args]


def error_from_runner(message: str | None) -> str | None:
    """The corpus error text of a runner error: the wrong-answer line alone when it is one."""
    if not message:
        return None
    for line in str(message).splitlines():
        idx = line.find(WRONG_ANSWER + ":")
        if idx >= 0:
            return line[idx:].strip()
    return str(message).strip()
