"""The shared-memory footprint of a CUDA sketch as a function of its tile factors.

Each ``CacheRead``/``CacheWrite`` into ``shared`` (or ``shared.dyn``) is placed at a tile
level; its buffer holds what the consumer reads (or writes) inside that loop, across the
block's threads. For an affine access ``index_d = sum_v c_dv * v`` the extent of dimension
``d`` is ``base_d + sum_v |c_dv| * span_v`` (capped at the buffer's shape), where ``span_v`` is
the range of loop ``v``'s tile levels that vary inside (levels after the placement loop in the
``Reorder``, and thread-bound levels, which shared memory spans):
``span = sum_p (f_p - 1) * prod_{q>p} f_q``. Bytes are ``prod_d extent_d * elem_bytes``, padded
by ``StorageAlign`` and multiplied by the copies a software pipeline keeps. This is what
``CompactBufferAllocation`` and ``InjectSoftwarePipeline`` allocate (tests compare it with the
lowered program). A tensor-core output staging buffer, whose layout depends on sampled factors,
is calibrated on TVM's own allocation instead (:func:`_calibrated`), and ``shared.dyn``
buffers are combined the way TVM's allocators merge them (:func:`total_bytes`).
:func:`vector_lanes` bounds the cooperative-fetch vector width.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

from tlm.language.trace_flow import PIPELINE_KEY, producers, split_members

@dataclass(frozen=True)
class SharedBuffer:
    """One shared-memory cache (read or write): per dimension ``(shape, base, ((tile, |coef|), ...))``,
    its extent being ``min(shape, base + sum(coef * span(tile)))``; ``relaxed`` gives, per
    tile, the factor positions that vary inside the buffer's compute-at loop."""

    name: str
    elem_bytes: int
    dims: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]
    relaxed: tuple[tuple[int, tuple[int, ...]], ...]
    versions: int = 1  # copies kept by a software pipeline (max stage - min stage + 1)
    align: tuple[int, int, int] | None = None  # StorageAlign (axis, factor, offset): padded stride
    pool: str = ""  # "": static shared (summed); "dyn-read"/"dyn-write": merged shared.dyn phases
    product: bool = False  # each dim's tile contributes prod(relaxed factors) - 1 (calibrated)


def level_range(factors: Sequence[int], positions: Sequence[int], product: bool = False) -> int:
    """What the levels at ``positions`` of one tiled loop add to a buffer dimension: their
    range (:func:`span`), or for a calibrated buffer their product minus one."""
    if product:
        return math.prod(int(factors[p]) for p in positions) - 1
    return span(factors, positions)


def total_bytes(sizes: Sequence[tuple[str, int]]) -> int:
    """What VerifyGPUCode counts for buffers of these (pool, bytes), in sketch order.

    Static ``shared`` buffers add up. ``shared.dyn`` buffers (tensor-core sketches) go through
    TVM's allocators, emulated here (TVM 0.27): the input copies ("dyn-read", live during the
    reduction) are dead when the output staging ("dyn-write") is allocated, so
    ``StorageRewrite`` lets each output take over one dead input whose size is within 16x
    (the smallest big-enough one, else the largest smaller one, grown); then
    ``MergeSharedMemoryAllocations`` packs the rest into one buffer, an output taking a
    big-enough dead input (within 16x) or else merging dead inputs, largest first, until they
    hold it. Buffers start at 64-byte boundaries.
    """
    static = sum(n for pool, n in sizes if not pool)
    reads = [_align64(n) for pool, n in sizes if pool == "dyn-read"]
    writes = [_align64(n) for pool, n in sizes if pool == "dyn-write"]
    free = sorted(reads)
    total, outputs = 0, []
    for c in writes:  # StorageRewrite
        big = [e for e in free if c <= e <= 16 * c]
        small = [e for e in free if 16 * e >= c and e < c]
        if big:
            free.remove(min(big))
            total += min(big)
        elif small:
            free.remove(max(small))
            total += c
        else:
            outputs.append(c)
    total += sum(free)
    for c in outputs:  # MergeSharedMemoryAllocations
        big = [e for e in free if c <= e <= 16 * c]
        if big:
            free.remove(min(big))
            continue
        taken = 0
        for e in sorted((e for e in free if e < c), reverse=True):
            free.remove(e)
            taken += e
            if taken >= c:
                break
        total += max(c, taken) - taken
    return static + total


def _align64(n: int) -> int:
    return -(-n // 64) * 64


def buffer_bytes(nbytes: int, extents: Sequence[int], align: tuple[int, int, int] | None) -> int:
    """Bytes of one buffer of these extents; with ``StorageAlign(axis, factor, offset)`` the
    stride of ``axis`` (the elements after it) is padded to ``offset`` modulo ``factor``."""
    if align is None:
        return nbytes * math.prod(extents)
    axis, factor, offset = align
    axis %= len(extents)
    inner = math.prod(extents[axis + 1:])
    inner += (offset - inner) % factor
    return nbytes * math.prod(extents[: axis + 1]) * inner


@dataclass(frozen=True)
class SharedMemory:
    """The shared-memory footprint of a sketch as a function of its tile factors."""

    limit: int  # max_shared_memory_per_block (bytes)
    buffers: tuple[SharedBuffer, ...]

    def footprint(self, factors: dict[int, Sequence[int]]) -> int:
        """Bytes of shared memory the program allocates for these tile factors."""
        sizes = []
        for b in self.buffers:
            rel = dict(b.relaxed)
            extents = [min(shape, base + sum(c * level_range(factors[t], rel[t], b.product) for t, c in terms))
                       for shape, base, terms in b.dims]
            sizes.append((b.pool, buffer_bytes(b.elem_bytes * b.versions, extents, b.align)))
        return total_bytes(sizes)


def span(factors: Sequence[int], positions: Sequence[int]) -> int:
    """Range (max - min) of a tiled loop when the levels at ``positions`` vary."""
    out, stride = 0, 1
    for p in range(len(factors) - 1, -1, -1):
        if p in positions:
            out += (int(factors[p]) - 1) * stride
        stride *= int(factors[p])
    return out


#: Storage scopes VerifyGPUCode counts as shared memory.
SHARED_SCOPES = ("shared", "shared.dyn")


def shared_memory(trace: Any, mod: Any, insts: Sequence[list], limit: int) -> SharedMemory | None:
    """The footprint model of a sketch's shared-memory caches (None when it has none).

    Covers ``CacheRead`` / ``CacheWrite`` into ``shared`` or ``shared.dyn`` placed by
    ``ComputeAt`` / ``ReverseComputeAt`` at a tile level (or a fusion of tile levels), with
    ``StorageAlign`` padding, software-pipeline copies and the merging of ``shared.dyn``
    buffers (:func:`total_bytes`).
    Raises ``ValueError`` when a cache does not fit the model (an access that is not affine,
    a placement that is not at tile levels): the caller then cannot promise shared-memory
    validity for that sketch.
    """
    producer = producers(insts)
    thread_bound: set[tuple[int, int]] = set()
    for inst in insts:
        if inst[0] == "Bind" and str(inst[2][0]).split(".")[0] in ("threadIdx", "vthread"):
            thread_bound |= set(split_members(insts, producer, inst[1][0]) or ())
    buffers = []
    for i, inst in enumerate(insts):
        if inst[0] not in ("CacheRead", "CacheWrite") or inst[2][1] not in SHARED_SCOPES:
            continue
        cache_rv, consumer = inst[3][0], inst[1][0]
        mover = "ComputeAt" if inst[0] == "CacheRead" else "ReverseComputeAt"
        at = next((x for x in insts[i + 1:] if x[0] == mover and x[1][0] == cache_rv), None)
        if at is None:
            raise ValueError(f"instruction {i}: shared cache without {mover}")
        where = split_members(insts, producer, at[1][1])
        if not where:
            raise ValueError(f"instruction {i}: cache placed at a loop that is not made of tile levels")
        reorder = next((x for x in insts[:i] if x[0] == "Reorder" and
                        set(where) <= {(split_members(insts, producer, rv) or [None])[0] for rv in x[1]}), None)
        if reorder is None:
            raise ValueError(f"instruction {i}: cache placement loop not found in a Reorder")
        order = [(split_members(insts, producer, rv) or [None])[0] for rv in reorder[1]]
        inside = set(order[max(order.index(m) for m in where) + 1:])
        buf = _buffer(trace, mod, insts, producer, consumer, int(inst[2][0]), inst[0] == "CacheWrite",
                      inside | thread_bound, i)
        stages = next((x[1][1] for x in insts if x[0] == "Annotate" and x[2] and x[2][0] == PIPELINE_KEY
                       and set(where) & set(split_members(insts, producer, x[1][0]) or ())), None)
        if stages:
            buf = replace(buf, versions=max(stages) - min(stages) + 1)
        align = next((x[2] for x in insts if x[0] == "StorageAlign" and x[1][0] == cache_rv), None)
        if align is not None:
            buf = replace(buf, align=(int(align[1]), int(align[2]), int(align[3])))
        if inst[2][1] == "shared.dyn":
            buf = replace(buf, pool="dyn-write" if inst[0] == "CacheWrite" else "dyn-read")
        if inst[0] == "CacheWrite" and inst[2][1] == "shared.dyn":
            # Tensor-core output staging: its layout is transformed with sampled factors and its
            # allocation sits inside a loop the trace moves, so the analytic model only bounds it.
            # Measure TVM's own allocation instead (a product of some tile levels) when it is one.
            buf = _calibrated(trace, mod, insts, f"{buf.name}_{inst[2][1]}", buf) or buf
        buffers.append(buf)
    if not buffers:
        return None
    return SharedMemory(limit=limit, buffers=tuple(buffers))


def _buffer(trace: Any, mod: Any, insts: Sequence[list], producer: dict, consumer: str,
            index: int, write: bool, varying: set, at_inst: int) -> SharedBuffer:
    """Model of the cache of ``consumer``'s ``index``-th read (or write) buffer, from the
    consumer's loops as they are just before tiling (the trace prefix up to its GetLoops)."""
    from tvm.s_tir.schedule import Schedule, Trace
    from tvm.sym import detect_linear_equation

    tiles = {i: inst for i, inst in enumerate(insts) if inst[0] == "SamplePerfectTile"}
    loop_tile: dict[int, int] = {}  # GetLoops output position -> tile instruction
    get_loops = None
    for t, inst in tiles.items():
        g, k = producer.get(inst[1][0], (None, None))
        if g is not None and insts[g][0] == "GetLoops" and insts[g][1][0] == consumer:
            get_loops = g
            loop_tile[k] = t
    if get_loops is None:
        raise ValueError(f"instruction {at_inst}: consumer loops not found")
    prefix = list(trace.insts)[: get_loops + 1]
    decisions = {x: trace.decisions[x] for x in prefix if x in trace.decisions}
    sch = Schedule(mod)
    Trace(prefix, decisions).apply_to_schedule(sch, remove_postproc=True)
    live = sch.trace.insts[get_loops]  # the replayed GetLoops: its RVs live in ``sch``
    block = sch.get(live.inputs[0])
    loop_vars = [sch.get(lv).loop_var for lv in live.outputs]
    realize = _realize(sch.mod["main"].body, str(block.name_hint))
    iter_vars = [iv.var for iv in block.iter_vars]
    # iter var j = sum_k a[j][k] * loop k (+ const)
    a = []
    for value in realize.iter_values:
        co = detect_linear_equation(value, loop_vars)
        if len(co) == 0:
            raise ValueError(f"instruction {at_inst}: block {block.name_hint} has a non-affine binding")
        a.append([int(c) for c in list(co)[:-1]])
    region = (block.writes if write else block.reads)[index]
    buf = region.source  # the buffer (TVM 0.27: TensorRegion.source)
    dims = []
    for rng, shape in zip(region.region, buf.shape):
        co = detect_linear_equation(rng.min, iter_vars)
        if len(co) == 0 or not hasattr(rng.extent, "value") or not hasattr(shape, "value"):
            raise ValueError(f"instruction {at_inst}: access to {buf.name} is not affine")
        by_loop = [sum(int(co[j]) * a[j][k] for j in range(len(iter_vars))) for k in range(len(loop_vars))]
        terms = []
        for k, c in enumerate(by_loop):
            if c == 0:
                continue
            if k not in loop_tile:
                raise ValueError(f"instruction {at_inst}: loop {k} of {block.name_hint} is not tiled")
            terms.append((loop_tile[k], abs(c)))
        dims.append((int(shape.value), int(rng.extent.value), tuple(terms)))
    relaxed = tuple((t, tuple(p for p in range(int(tiles[t][2][0])) if (t, p) in varying))
                    for t in sorted({t for _, _, terms in dims for t, _ in terms}))
    bits = int(getattr(buf.dtype, "bits", 0) or _dtype_bits(str(buf.dtype)))
    return SharedBuffer(name=str(buf.name), elem_bytes=max(1, bits // 8), dims=tuple(dims), relaxed=relaxed)


#: VerifyGPUCode's limit on the bytes of one vector access (MetaSchedule's postproc default).
MAX_VECTOR_BYTES = 16
_FETCH_KEY = "meta_schedule.cooperative_fetch"


def vector_lanes(trace: Any, mod: Any, insts: Sequence[list]) -> dict[int, int]:
    """``SampleCategorical`` instruction -> most vector lanes its cooperative fetch may use.

    ``RewriteCooperativeFetch`` vectorises a shared-memory copy by the sampled lane count.
    ``VerifyGPUCode`` refuses a vector of more than :data:`MAX_VECTOR_BYTES` bytes, and a
    vector index of stride != 1 (a transposed copy reads global memory with a strided ramp)
    is itself a vector of 4-byte (int32) indices, so such a copy may use at most 4 lanes.
    Whether a copy is strided is fixed by the sketch (its layouts), not by the decisions.
    """
    from tvm.s_tir.schedule import Schedule
    from tvm.sym import detect_linear_equation

    producer = producers(insts)
    fetches = [(i, producer[x[1][1]][0]) for i, x in enumerate(insts)
               if x[0] == "Annotate" and x[2] and x[2][0] == _FETCH_KEY and isinstance(x[1][1], str)
               and x[1][1] in producer and insts[producer[x[1][1]][0]][0] == "SampleCategorical"]
    if not fetches:
        return {}
    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=True)
    live = sch.trace.insts
    out = {}
    for ann, pick in fetches:
        block = sch.get(live[ann].inputs[0])
        regions = list(block.reads) + list(block.writes)
        shared = [r for r in regions if r.source.scope() in SHARED_SCOPES]
        glob = [r for r in regions if r.source.scope() == "global"]
        if not shared:
            continue
        elem = max(1, int(_dtype_bits(str(shared[0].source.dtype))) // 8)
        lanes = MAX_VECTOR_BYTES // elem
        iter_vars = [iv.var for iv in block.iter_vars]
        inner = detect_linear_equation(shared[0].region[-1].min, iter_vars) if iter_vars else []
        var = next((j for j in range(len(iter_vars)) if len(inner) and int(inner[j]) != 0), None)
        for g in glob:
            shape = [int(x) for x in g.source.shape]
            stride = 0
            for d, rng in enumerate(g.region):
                co = detect_linear_equation(rng.min, iter_vars)
                if var is None or len(co) == 0:
                    stride = None
                    break
                stride += int(co[var]) * math.prod(shape[d + 1:])
            if stride != 1:  # strided (or not affine: assume strided)
                index_bytes = 8 if math.prod(shape) >= 2**31 else 4
                lanes = min(lanes, MAX_VECTOR_BYTES // index_bytes)
        out[pick] = lanes
    return out


def _allocated_bytes(trace: Any, mod: Any, name: str) -> int | None:
    """Bytes of buffer ``name`` after ``CompactBufferAllocation`` of ``trace`` applied to ``mod``."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=True)
    S = s_tir.transform
    func = sch.mod["main"].with_attr("global_symbol", "main")
    compacted = tvm.transform.Sequential([
        S.LowerCrossThreadReduction(), S.LowerInitBlock(), S.PlanAndUpdateBufferAllocationLocation(),
        S.ConvertBlocksToOpaque(), S.LiftThreadBinding(), S.ManifestSharedMemoryLocalStage(),
        S.CompactBufferAllocation()])(tvm.IRModule({"main": func}))
    for stmt in statements(compacted["main"].body):
        for b in list(getattr(stmt, "alloc_buffers", None) or []):
            if str(b.name) == name:
                shape = [int(x) for x in b.shape]
                n = shape[0] * int(b.strides[0]) if len(b.strides) else math.prod(shape)
                return n * _dtype_bits(str(b.dtype)) // 8
    return None


def _calibrated(trace: Any, mod: Any, insts: Sequence[list], name: str, buf: SharedBuffer) -> SharedBuffer | None:
    """A product model of buffer ``name`` measured on TVM: starting from tiles whose factors
    all sit at the outermost level, move the smallest prime of each extent to one level at a
    time and see whether the allocation grows by it; then check the model on two other
    tilings. None when the buffer is not such a product (the caller keeps its bound)."""
    from tvm.s_tir.schedule import Trace

    tiles = {i: int(x[2][0]) for i, x in enumerate(insts) if x[0] == "SamplePerfectTile"}
    kinds = list(trace.insts)
    decisions = dict(trace.decisions)
    extents = {i: math.prod(int(v) for v in decisions[kinds[i]]) for i in tiles}

    def measure(factors: dict[int, list[int]]) -> int | None:
        dec = dict(decisions)
        for i, f in factors.items():
            dec[kinds[i]] = f
        try:
            return _allocated_bytes(Trace(kinds, dec), mod, name)
        except Exception:  # noqa: BLE001 - a tiling TVM cannot apply: no calibration
            return None

    def outer(i: int) -> list[int]:
        return [extents[i]] + [1] * (tiles[i] - 1)

    base = {i: outer(i) for i in tiles}
    base_bytes = measure(base)
    if not base_bytes:
        return None
    relaxed: dict[int, list[int]] = {}
    for i, n in tiles.items():
        q = next((d for d in range(2, extents[i] + 1) if extents[i] % d == 0), None)
        for p in range(1, n):
            if q is None:
                continue
            probe = dict(base)
            probe[i] = outer(i)
            probe[i][0] //= q
            probe[i][p] = q
            got = measure(probe)
            if got == base_bytes * q:
                relaxed.setdefault(i, []).append(p)
            elif got != base_bytes:
                return None
    model = replace(buf, elem_bytes=base_bytes, versions=1, align=None, product=True,
                    dims=tuple((1 << 62, 1, ((i, 1),)) for i in sorted(relaxed)),
                    relaxed=tuple((i, tuple(ps)) for i, ps in sorted(relaxed.items())))
    for k in (2, 3):  # check on tilings with several levels > 1 at once
        probe = {}
        for i, n in tiles.items():
            f, rest = [1] * n, extents[i]
            for p in range(n - 1, 0, -1):
                d = next((d for d in range(k, 1, -1) if rest % d == 0), 1)
                f[p], rest = d, rest // d
            f[0] = rest
            probe[i] = f
        want = measure(probe)
        if want is None or SharedMemory(1, (model,)).footprint(probe) != want:
            return None
    return model


def _dtype_bits(dtype: str) -> int:
    import tvm

    return tvm.DataType(dtype).bits


def statements(root: Any) -> Iterator[Any]:
    """Every statement under a TIR statement (itself included), blocks and branches too."""
    todo = [root]
    while todo:
        stmt = todo.pop()
        yield stmt
        for attr in ("block", "body", "then_case", "else_case"):
            child = getattr(stmt, attr, None)
            if child is not None and type(child).__module__.startswith("tvm"):
                todo.append(child)
        todo.extend(getattr(stmt, "seq", None) or [])


def _realize(stmt: Any, name: str) -> Any:
    """The SBlockRealize of block ``name`` under ``stmt``."""
    for s in statements(stmt):
        if type(s).__name__ == "SBlockRealize" and str(s.block.name_hint) == name:
            return s
    raise ValueError(f"block {name} not found")
