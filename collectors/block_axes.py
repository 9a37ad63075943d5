"""What the blocked (BLIS-style) plans of :mod:`collectors.blocking` read of one block, from its TIR
alone: its loops' extents and kinds, which loop is the output's contiguous axis, which one reuses
the vector loads, what every parallel chunk of a split reads again, and whether the vector-loaded
input is read at a stride, as one contiguous plane, or packed (a deployer's layout-free weight).
No hardware here: :mod:`collectors.blocking` sizes the tiles from these and the host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BlockAxes:
    """What the blocked (BLIS-style) plan needs of a block: its loops' extents and kinds in order,
    which spatial loop is the output's contiguous axis, and which one reuses the vector loads."""

    extents: tuple[int, ...]
    reduce: tuple[bool, ...]
    vector: int  # loop index of the output's stride-1 axis
    rows: int | None  # loop index of the axis the vector-loaded input does not depend on (None: none)
    #: per loop, the elements of the inputs that do not depend on it: what every parallel chunk of
    #: a split of that loop reads again (a matmul's ``i``: all of B; its ``j``: all of A)
    reread: tuple[int, ...] = ()
    #: a vector-loaded input is read at a stride along the vector axis (a stride-2 convolution's
    #: ``x * 2 + rx``): a vector of outputs gathers its inputs
    strided: bool = False
    #: loop index of the axis before the vector axis when the (that axis x vector axis) plane is
    #: one contiguous run in the output and every vector-loaded input (a 1x1 convolution's image:
    #: rows ``W`` floats apart in buffers ``W`` wide), else None: a vector may span the plane
    plane: int | None = None
    #: every vector-loaded input is a layout-free parameter: ``RewriteLayout`` stores it in the
    #: order the tiles walk (BLIS's packed B), so its kc rows lie one after another, not a row apart
    packed: bool = False
    #: elements from one row of the (first) vector-loaded input to the next: its last dimension's
    #: extent (an unpacked B's N), 0 where not a constant; where its rows land in the cache's sets
    row_elements: int = 0


def block_axes(mod: Any, block_name: str) -> BlockAxes | None:
    """The :class:`BlockAxes` of ``block_name`` in an unscheduled module (None: not a plain
    loop nest over its iterators, or no contiguous output axis)."""
    import tvm
    from tvm.tirx.analysis import undefined_vars

    from collectors.layout import layout_free_params
    from collectors.tir import as_module, block_realizes, contiguous_axis, is_reduction

    func = next(iter(as_module(mod).functions.values()))
    found = next((r for r, _ in block_realizes(func.body) if str(r.block.name_hint) == block_name), None)
    if found is None:
        return None
    vec, loaded = contiguous_axis(found.block)
    if vec is None:
        return None
    ivs = list(found.block.iter_vars)
    strided = any(_stride(r.region[-1].min, ivs[vec].var) != 1 for r in loaded)
    used = set()  # what the inputs loaded as vectors depend on
    for r in loaded:
        for rng in r.region:
            used |= set(undefined_vars(rng.min))
    reduce = tuple(is_reduction(iv) for iv in ivs)
    extents = tuple(int(iv.dom.extent) for iv in ivs)
    rows = [i for i, iv in enumerate(ivs) if not reduce[i] and i != vec and iv.var not in used and extents[i] > 1]
    reread = rereads(found.block)
    free = [func.params[i] for i in layout_free_params(func) or []]  # TVM 0.27: the parameters are the buffers
    packed = bool(loaded) and all(any(r.source.same_as(b) for b in free) for r in loaded)
    last = loaded[0].source.shape[-1] if loaded else None
    return BlockAxes(extents, reduce, vec, max(rows, key=lambda i: (extents[i], i)) if rows else None, reread,
                     strided and len(found.block.reads) >= 2, _contiguous_plane(found.block, vec, loaded), packed,
                     int(last) if isinstance(last, tvm.tirx.IntImm) else 0)


def rereads(block: Any, *, in_bytes: bool = False) -> tuple[int, ...]:
    """Per iterator of ``block``, the elements (``in_bytes``: bytes) of the inputs that do not
    depend on it: what every parallel chunk of a split of its loop reads again
    (:attr:`BlockAxes.reread`; an input of symbolic shape is not weighed)."""
    import tvm
    from tvm.tirx.analysis import undefined_vars

    ivs = list(block.iter_vars)
    write = block.writes[0].source
    out = [0] * len(ivs)
    for r in block.reads:
        if r.source.same_as(write):
            continue
        depends = set()
        for rng in r.region:
            depends |= set(undefined_vars(rng.min))
        shape = [d for d in r.source.shape if isinstance(d, tvm.tirx.IntImm)]
        size = math.prod(int(d) for d in shape) if len(shape) == len(r.source.shape) else 0
        if in_bytes:
            size *= tvm.DataType(str(r.source.dtype)).bits // 8
        for i, iv in enumerate(ivs):
            if iv.var not in depends:
                out[i] += size
    return tuple(out)


def _contiguous_plane(block: Any, vec: int, loaded: list) -> int | None:
    """:attr:`BlockAxes.plane`: the spatial iterator before ``vec`` when the output and each
    vector-loaded input index their last two dimensions by (it, ``vec``'s) alone, at stride 1
    (iterators of extent 1, a 1x1 kernel's taps, aside), their last dimension as long as ``vec``'s
    extent."""
    import tvm
    from tvm.tirx.analysis import undefined_vars

    ivs = list(block.iter_vars)
    if vec == 0 or int(ivs[vec - 1].iter_type) != 0:  # 0: data parallel
        return None
    unit = {iv.var for iv in ivs if int(iv.dom.extent) == 1}
    width = int(ivs[vec].dom.extent)

    def only(index: Any, var: Any) -> bool:
        return _stride(index, var) == 1 and all(v.same_as(var) or v in unit for v in undefined_vars(index))
    for region in [block.writes[0], *loaded]:
        shape, idx = region.source.shape, region.region
        if (len(idx) < 2 or not isinstance(shape[-1], tvm.tirx.IntImm) or int(shape[-1]) != width
                or not only(idx[-1].min, ivs[vec].var) or not only(idx[-2].min, ivs[vec - 1].var)):
            return None
    return vec - 1


def _stride(index: Any, var: Any) -> int | None:
    """The coefficient of ``var`` in ``index`` (None: not linear in it)."""
    import tvm
    from tvm.sym.pattern import detect_linear_equation  # TVM 0.27's home of tvm.arith's

    coef = detect_linear_equation(index, [var])
    return int(coef[0]) if len(coef) and isinstance(coef[0], tvm.tirx.IntImm) else None
