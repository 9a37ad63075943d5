"""What a task computes, in one word: its op kind (a prompt word of the TLM's language).

Read from a MetaSchedule task name first ("fused_conv2d_add_relu" is a ``conv2d``), and from the
program itself when the name says nothing (a subgraph posted as TVMScript under the name
``main``): its blocks' iterators and accesses tell a convolution, a matmul, a softmax, a norm, a
gather or a layout change apart (``tests/collectors/test_zoo_tasks.py``).
"""
from __future__ import annotations

import re
from typing import Any, Iterator


#: Coarse op kinds, tested in order against the task name (first match wins).
_OP_KINDS = (
    ("conv2d", r"conv2d"),
    ("conv1d", r"conv1d"),
    ("matmul", r"matmul|dense|linear|batch_matmul"),
    ("softmax", r"softmax"),
    ("norm", r"layer_norm|rms_norm|group_norm|batch_norm"),
    ("pool", r"pool"),
    ("reduction", r"\bsum\b|mean|max\b|min\b|variance|reduce|_sum|_mean"),
    ("gather", r"take|gather|embedding|index"),
    ("layout", r"transpose|reshape|concat|split|strided_slice|broadcast_to|squeeze|expand_dims|permute"),
)


def op_kind_of(task_name: str, mod: Any = None) -> str:
    """A coarse op kind: from a MetaSchedule task name ("fused_conv2d_add_relu" → "conv2d"), and
    from the program itself (:func:`program_op_kind`) when the name says nothing, as a subgraph
    posted as TVMScript under the name ``main`` does. (The name keeps the last word where it
    speaks: the op kind is a prompt word, and the shipped models read the zoo's names' kinds.)"""
    name = task_name.lower()
    for kind, pattern in _OP_KINDS:
        if re.search(pattern, name):
            return kind
    return program_op_kind(mod) if mod is not None else "elementwise"


def program_op_kind(mod: Any) -> str:
    """The op kind of a program, read from its blocks' iterators and accesses:

    * a sum-of-products reduction reading an input at ``spatial + reduction`` indices (a sliding
      window) is a convolution, ``conv1d``/``conv2d`` by its windowed dimensions; any other
      reduction over a window (a max, or a sum of one input) is a ``pool``;
    * any other sum-of-products reduction of two inputs is a ``matmul`` (GEMV and batched too);
    * reductions with a max and an ``exp`` are a ``softmax``; with a square root, a ``norm``;
      any other reduction is a ``reduction``;
    * without reductions: an index computed from a loaded value is a ``gather``; blocks that only
      move values (transpose, reshape, concat, slices) are ``layout``; the rest ``elementwise``.
    """
    from tvm.tirx.analysis import undefined_vars

    from collectors.tir import as_module, block_realizes, is_reduction

    func = next(iter(as_module(mod).functions.values()))
    blocks = [r.block for r, _ in block_realizes(func.body) if str(r.block.name_hint) != "root"]
    calls = {str(getattr(n.op, "name", "")).split(".")[-1] for b in blocks for n in _nodes(b.body)
             if type(n).__name__ == "Call"}
    kinds, gathers, moves = [], False, True
    for block in blocks:
        value = getattr(block.body, "value", None)
        reduce_vars = {iv.var for iv in block.iter_vars if is_reduction(iv)}
        if not reduce_vars:
            loads = [n for n in _nodes(value) if type(n).__name__ in _LOADS] if value is not None else []
            gathers |= any(type(m).__name__ in _LOADS for ld in loads for i in ld.indices for m in _nodes(i))
            moves &= value is not None and not _computes(value)
            continue
        spatial_vars = {iv.var for iv in block.iter_vars if not is_reduction(iv)}
        ins = [r for r in block.reads if not any(r.source.same_as(w.source) for w in block.writes)]
        windowed = max((sum(1 for rng in r.region if (set(undefined_vars(rng.min)) & reduce_vars)
                            and (set(undefined_vars(rng.min)) & spatial_vars)) for r in ins), default=0)
        kind = type(value).__name__
        product = kind == "Add" and any(_product_of_two_inputs(x) for x in (value.a, value.b))
        if windowed and product and len(ins) >= 2:
            kinds.append("conv1d" if windowed == 1 else "conv2d")
        elif windowed:
            kinds.append("pool")
        elif product and len(ins) >= 2:
            kinds.append("matmul")
        else:
            kinds.append("max" if kind in ("Max", "Min") else "reduction")
    for k in ("conv2d", "conv1d", "matmul", "pool"):
        if k in kinds:
            return k
    if kinds:
        if "max" in kinds and "exp" in calls:
            return "softmax"
        return "norm" if calls & {"sqrt", "rsqrt"} else "reduction"
    if gathers:
        return "gather"
    return "layout" if moves and blocks else "elementwise"


#: What a read of a buffer is called (TVM 0.27: TensorLoad)
_LOADS = {"BufferLoad", "TensorLoad"}


def _product_of_two_inputs(expr: Any) -> bool:
    """``a[...] * b[...]`` of two different buffers (each maybe cast): a matmul's or a
    convolution's term, not a variance's ``(x - mean) * (x - mean)``."""
    if type(expr).__name__ != "Mul":
        return False
    sides = []
    for side in (expr.a, expr.b):
        while type(side).__name__ == "Cast":
            side = side.value
        if type(side).__name__ not in _LOADS:
            return False
        buf = getattr(side, "source", None)
        sides.append(buf if buf is not None else getattr(side, "buffer", None))
    return sides[0] is not None and not sides[0].same_as(sides[1])


def _computes(value: Any) -> bool:
    """Whether a stored value computes anything beyond loading (index arithmetic aside)."""
    kind = type(value).__name__
    if kind in _LOADS or kind in ("IntImm", "FloatImm", "Var"):
        return False
    if kind == "Cast":
        return _computes(value.value)
    if kind == "Call" and str(getattr(value.op, "name", "")).endswith("if_then_else"):  # pad, where
        return any(_computes(a) for a in list(value.args)[1:])
    if kind == "Select":
        return _computes(value.true_value) or _computes(value.false_value)
    return True


#: Where a TIR node keeps its children
_CHILDREN = ("a", "b", "value", "args", "indices", "condition", "true_value", "false_value", "body", "seq",
             "then_case", "else_case", "block", "init")


def _nodes(node: Any) -> Iterator[Any]:
    """Every TIR node under ``node`` (itself included), expressions and statements."""
    todo = [node]
    while todo:
        n = todo.pop()
        if n is None:
            continue
        if isinstance(n, (list, tuple)) or type(n).__name__ == "Array":
            todo.extend(n)
            continue
        if not type(n).__module__.startswith("tvm"):
            continue
        yield n
        for attr in _CHILDREN:
            child = getattr(n, attr, None)
            if child is not None and not isinstance(child, (str, int, float)):
                todo.append(child)
