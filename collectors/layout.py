"""Layout rewrites of layout-free inputs: what a schedule does to its function's signature.

A PrimFunc may mark inputs as layout-free (``layout_free_buffers``; TOPI's ``dense``,
``batch_matmul``, ``conv2d_nhwc`` and others set it for their weights). MetaSchedule's
``RewriteLayout`` postprocessor may then read such an input in a layout that suits the schedule:
the scheduled function starts with a *layout rewrite block* (annotated
``meta_schedule.layout_rewrite_preproc``) copying the input into the new layout, and the builder
removes that block (``RemoveWeightLayoutRewriteBlock``, as MetaSchedule builds), so the built
function **takes the input already rewritten** — weights are rewritten once, ahead of time, in a
real deployment (Relax does it for a whole model).

So whoever runs a built candidate must hand it that input rewritten the same way, and whoever is
handed a schedule must know. :func:`layout_rewrites` reads each rewrite (which parameter, its new
shape, the index map) from the scheduled function; :func:`rewrite_inputs` applies them to arrays.
The builder stores them beside each artifact (:func:`save` / :func:`load`) so the runner can
rewrite the reference inputs and check the answer against rewritten copies, and the API returns
them with the schedule.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

#: The PrimFunc attribute marking its layout-free inputs (without it RewriteLayout rewrites nothing).
LAYOUT_FREE_ATTR = "layout_free_buffers"
#: The block annotation MetaSchedule's RewriteLayout puts on a layout rewrite block.
PREPROC_ANNOTATION = "meta_schedule.layout_rewrite_preproc"
#: File beside a built artifact holding its rewrites (absent: the signature is the task's).
ARTIFACT_FILE = "layout_rewrites.json"


@dataclass(frozen=True)
class LayoutRewrite:
    """Parameter ``param`` of the function is read in layout ``index_map`` (TVMScript of a
    ``T.index_map``: original indices -> new ones) with shape ``shape`` once built."""

    param: int
    shape: tuple[int, ...]
    index_map: str
    index_map_json: str  # tvm.ir.save_json of the IndexMap: what apply() loads

    def to_json(self) -> dict:
        return {"param": self.param, "shape": list(self.shape), "index_map": self.index_map,
                "index_map_json": self.index_map_json}

    @classmethod
    def from_json(cls, d: dict) -> "LayoutRewrite":
        return cls(int(d["param"]), tuple(int(x) for x in d["shape"]), str(d["index_map"]), str(d["index_map_json"]))

    def apply(self, array: Any) -> Any:
        """``array`` (the parameter in its original layout, a numpy array) in the new layout.

        The index map is evaluated on numpy index grids (one vectorised scatter): TVM's
        ``IndexMap.map_tensor`` took 3.3 s to over 12 minutes on a 2048x512 weight (issue 33); a
        map of an expression numpy cannot evaluate falls back to it."""
        import numpy as np
        import tvm

        index_map = tvm.ir.load_json(self.index_map_json)
        array = np.ascontiguousarray(array)
        out = _split_and_reorder(index_map, array, self.shape)
        if out is None:
            try:
                out = _scatter(index_map, array, self.shape)
            except NotImplementedError:
                out = index_map.map_tensor(tvm.runtime.tensor(array)).numpy()
        if tuple(out.shape) != self.shape:
            raise ValueError(f"layout rewrite of parameter {self.param}: got shape {tuple(out.shape)}, "
                             f"expected {self.shape}")
        return out


def _split_and_reorder(index_map: Any, array: Any, shape: tuple[int, ...]) -> Any | None:
    """``array`` in ``index_map``'s layout as a reshape and a transpose, or None when the map is
    not one: each new index one piece of one original index (``i // d % m`` and its spellings),
    the pieces of each index tiling it exactly (no padding). What ``RewriteLayout`` writes for a
    packed weight is one; the scatter took ~2.3 s of LLaMA-7B's 131M-element LM head weight a
    measured candidate, this ~0.4 s. A few elements are checked against the map itself."""
    import numpy as np

    names = [v.name for v in index_map.initial_indices]
    if len(names) != array.ndim or len(index_map.final_indices) != len(shape):
        return None
    pieces = []  # per new axis: (original axis, divisor, extent) or None (a constant 0 of extent 1)
    for e, m in zip(index_map.final_indices, shape):
        piece = _piece(e, names, array.shape)
        if piece is None or piece[2] != m:
            return None
        pieces.append(piece if piece[0] >= 0 else None)
    split_shape, axis_of = [], {}
    for axis, extent in enumerate(array.shape):
        mine = sorted((p[1], p[2], j) for j, p in enumerate(pieces) if p is not None and p[0] == axis)
        d = 1
        for div, ext, _ in mine:  # from the fastest-varying piece up: divisors 1, m1, m1*m2, ...
            if div != d:
                return None
            d *= ext
        if d != extent:
            return None
        for div, ext, j in reversed(mine):  # slowest-varying first, as a C-order reshape splits
            axis_of[j] = len(split_shape)
            split_shape.append(ext)
    moved = array.reshape(split_shape).transpose([axis_of[j] for j in range(len(shape)) if j in axis_of])
    out = np.ascontiguousarray(moved).reshape(shape)
    rng = np.random.default_rng(0)  # a few elements checked against the map itself
    at = [rng.integers(0, n, size=16) for n in array.shape]
    env = {name: idx for name, idx in zip(names, at)}
    new = [np.broadcast_to(_evaluate(e, env), (16,)) for e in index_map.final_indices]
    return out if np.array_equal(out[tuple(new)], array[tuple(at)]) else None


def _piece(expr: Any, names: list[str], extents: tuple[int, ...]) -> tuple[int, int, int] | None:
    """``expr`` as ``(original axis, divisor, extent)``: ``i // d % m`` (or ``i % (d*m) // d``,
    ``i // d``, ``i % m``, ``i``) over original index ``i``; ``(-1, 1, 1)`` for a constant 0; else None."""
    kind = type(expr).__name__
    if kind == "IntImm":
        return (-1, 1, 1) if int(expr.value) == 0 else None
    if kind == "Cast":
        return _piece(expr.value, names, extents)
    if kind == "Var":
        return (names.index(expr.name), 1, extents[names.index(expr.name)]) if expr.name in names else None
    if kind not in ("FloorDiv", "FloorMod") or type(expr.b).__name__ != "IntImm" or int(expr.b.value) <= 0:
        return None
    inner, c = _piece(expr.a, names, extents), int(expr.b.value)
    if inner is None or inner[0] < 0:
        return None
    axis, div, ext = inner
    if kind == "FloorDiv":
        return (axis, div * c, ext // c) if ext % c == 0 else None
    return (axis, div, c) if ext % c == 0 else None


def _scatter(index_map: Any, array: Any, shape: tuple[int, ...]) -> Any:
    """``array`` moved to ``index_map``'s new indices, in an array of ``shape``; raises
    ``NotImplementedError`` on an index expression :func:`_evaluate` cannot evaluate."""
    import numpy as np

    if len(index_map.initial_indices) != array.ndim:
        raise NotImplementedError("index map arity differs from the array's")
    grids = np.indices(array.shape, dtype=np.int64, sparse=True)
    env = {v.name: g for v, g in zip(index_map.initial_indices, grids)}
    new = [np.broadcast_to(_evaluate(e, env), array.shape) for e in index_map.final_indices]
    out = np.zeros(shape, dtype=array.dtype)
    out[tuple(new)] = array
    return out


def _evaluate(expr: Any, env: dict) -> Any:
    """A TIR index expression over numpy index grids (``env``: variable name -> grid)."""
    import numpy as np

    kind = type(expr).__name__
    if kind == "Var":
        return env[expr.name]
    if kind == "IntImm":
        return int(expr.value)
    if kind == "Cast":
        return _evaluate(expr.value, env)
    ops = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
           "FloorMod": np.mod, "Min": np.minimum, "Max": np.maximum}
    if kind not in ops:
        raise NotImplementedError(kind)
    return ops[kind](_evaluate(expr.a, env), _evaluate(expr.b, env))


def layout_rewrites(mod: Any) -> list[LayoutRewrite]:
    """The layout rewrites a scheduled module's ``main`` performs on its parameters, by parameter
    position ([] when it keeps every input's layout).

    Each layout rewrite block must copy one parameter, element for element, into a buffer indexed
    by functions of the block's iteration variables (what RewriteLayout writes); anything else is
    a ``ValueError`` (a rewrite this module cannot carry out on the inputs)."""
    import tvm
    from tvm import tirx
    from tvm.s_tir import Schedule

    func = mod["main"] if hasattr(mod, "functions_items") else mod
    if not marks_layout_free(func):  # the common case, on every build and answer: no schedule to walk
        return []
    params = list(func.params)
    sch = Schedule(tvm.IRModule({"main": func}))
    found: list[LayoutRewrite] = []
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        block = sch.get(rv)
        if PREPROC_ANNOTATION not in block.annotations:
            continue
        store, ivars = block.body, [iv.var for iv in block.iter_vars]
        load = getattr(store, "value", None)
        source = getattr(load, "source", None)
        position = next((i for i, p in enumerate(params) if source is not None and p.same_as(source)), None)
        if (not isinstance(store, tirx.BufferStore) or position is None
                or len(load.indices) != len(ivars) or not all(a.same_as(v) for a, v in zip(load.indices, ivars))):
            raise ValueError(f"layout rewrite block {block.name_hint!r} is not a copy of one parameter: "
                             f"{block.body.script()[:200]}")
        index_map = tirx.IndexMap(ivars, list(store.indices), None)
        shape = tuple(int(s) for s in store.buffer.shape)
        found.append(LayoutRewrite(position, shape, str(index_map), tvm.ir.save_json(index_map)))
    return sorted(found, key=lambda r: r.param)


def rewrite_inputs(rewrites: Sequence[LayoutRewrite], arrays: Sequence[Any]) -> list[Any]:
    """``arrays`` (one per parameter, original layouts) with each rewritten parameter replaced by
    its rewritten copy; the others are passed through unchanged."""
    out = list(arrays)
    for r in rewrites:
        out[r.param] = r.apply(out[r.param])
    return out


def save(rewrites: Sequence[LayoutRewrite], artifact_dir: str) -> None:
    """Store ``rewrites`` beside a built artifact (nothing when there are none)."""
    if rewrites:
        with open(os.path.join(artifact_dir, ARTIFACT_FILE), "w") as f:
            json.dump([r.to_json() for r in rewrites], f)


def load(artifact_path: str) -> list[LayoutRewrite]:
    """The rewrites stored beside the artifact at ``artifact_path`` ([] when none)."""
    path = os.path.join(os.path.dirname(artifact_path), ARTIFACT_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [LayoutRewrite.from_json(d) for d in json.load(f)]


def without_layout_freedom(mod: Any) -> Any:
    """``mod`` with no input marked layout-free: every schedule of it keeps the signature (the
    way to ask for schedules whose inputs need no rewriting); ``mod`` itself when none is."""
    import tvm

    func = mod["main"]
    if not marks_layout_free(func):
        return mod
    return tvm.IRModule({"main": func.without_attr(LAYOUT_FREE_ATTR)})


def unpacked_keys(tasks: Any) -> list[str]:
    """The workload keys of ``tasks`` that mark an input layout-free, each as it is without
    (:func:`without_layout_freedom`): a prepacked task of ``tlm compile`` under the key that
    ``tlm collect``, which keeps every weight's layout, measures it by."""
    from collectors.tir import workload_key

    return sorted({workload_key(m) for t in tasks for m in [without_layout_freedom(t.mod)] if m is not t.mod})


def marks_layout_free(func: Any) -> bool:
    """Whether the PrimFunc marks any input layout-free."""
    return layout_free_params(func) is not None


def layout_free_params(func: Any) -> list[int] | None:
    """The positions of the PrimFunc's layout-free parameters; None when it carries no
    ``layout_free_buffers`` at all ([] is what TVM attaches to a function that reads no weight)."""
    if func.attrs is None or LAYOUT_FREE_ATTR not in func.attrs:
        return None
    return [int(i) for i in func.attrs[LAYOUT_FREE_ATTR]]
