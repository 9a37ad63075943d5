"""GPU limits on tile factors, so every CUDA sentence passes ``VerifyGPUCode`` as written.

Three limits of a CUDA multi-level-tiling sketch depend on its tile factors, and
``VerifyGPUCode`` (the postprocessor MetaSchedule runs last) rejects a program that breaks any:

* **Thread extents.** One level of every spatial tile is fused and bound to ``threadIdx.x``
  (another to ``vthread.x``); the thread count must stay in
  ``[thread_extent_low_inclusive, thread_extent_high_inclusive]`` (capped by
  ``max_threads_per_block``), the virtual-thread count at most :data:`MAX_VTHREAD`.
* **Software pipelines.** Sketches that pipeline the shared-memory copies annotate the fused
  outer reduction loop with ``software_pipeline_stage``; when that loop has extent 1 the stages
  no longer match the loop body and ``InjectSoftwarePipeline`` fails (measured: every such
  program is rejected), so its extent must be at least 2.
* **Shared memory.** Each ``CacheRead(..., "shared")`` is computed at an outer reduction loop;
  its buffer holds what the consumer reads inside that loop, across the block's threads. For an
  affine access ``index_d = sum_v c_dv * v`` the extent of dimension ``d`` is
  ``1 + sum_v |c_dv| * span_v`` (capped at the buffer's shape), where ``span_v`` is the range
  of loop ``v``'s tile levels that vary inside (levels after the compute-at loop in the
  ``Reorder``, and thread-bound levels, which shared memory spans):
  ``span = sum_p (f_p - 1) * prod_{q>p} f_q``. The sum over buffers of
  ``prod_d extent_d * bytes`` (times the copies a software pipeline keeps: max stage - min
  stage + 1) must not exceed ``max_shared_memory_per_block``. This is what
  ``CompactBufferAllocation`` and ``InjectSoftwarePipeline`` allocate; tests compare it with
  the lowered program.

A :class:`ThreadGroup` (thread and pipeline limits) is a loop whose extent is a product of tile
factors, found by following the trace's data flow ``Bind|Annotate <- Fuse <- Split <-
SamplePerfectTile``. :class:`SharedMemory` is the footprint model. :func:`feasible_factors` keeps
a candidate factor only if *some* completion of every unfinished tile meets all limits (a
depth-first search over per-tile options, pruned by bounds), so a walk never reaches a dead end.
"""
from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

logger = logging.getLogger(__name__)

#: VerifyGPUCode's limit on virtual threads per block (MetaSchedule's postproc default).
MAX_VTHREAD = 8
#: Upper bound used for groups that only have a lower limit (pipelined loops).
NO_LIMIT = 1 << 62
PIPELINE_AXIS = "software_pipeline"
_LOW_KEY = "meta_schedule.thread_extent_low_inclusive"
_HIGH_KEY = "meta_schedule.thread_extent_high_inclusive"
_PIPELINE_KEY = "software_pipeline_stage"
_WARP_KEY = "warp_execution"


@dataclass(frozen=True)
class ThreadGroup:
    """A bound or pipelined loop whose extent is a product of tile factors."""

    axis: str  # "threadIdx.x", "vthread.x", ... or PIPELINE_AXIS
    members: tuple[tuple[int, int], ...]  # (SamplePerfectTile instruction, factor position)
    low: int  # smallest legal extent
    high: int  # largest legal extent


def _producers(insts: Sequence[list]) -> dict[str, tuple[int, int]]:
    producer: dict[str, tuple[int, int]] = {}
    for i, inst in enumerate(insts):
        for p, out in enumerate(inst[3] or []):
            if isinstance(out, str):
                producer[out] = (i, p)
    return producer


def _split_members(insts: Sequence[list], producer: dict, rv: Any) -> list[tuple[int, int]] | None:
    """The (tile instruction, factor position) of every split loop fused into loop ``rv``."""
    if not isinstance(rv, str) or rv not in producer:
        return None
    i, p = producer[rv]
    kind, inputs = insts[i][0], insts[i][1]
    if kind == "Fuse":
        out: list[tuple[int, int]] = []
        for x in inputs:
            m = _split_members(insts, producer, x)
            if m is None:
                return None
            out += m
        return out
    if kind == "Split":
        f = inputs[1 + p] if 1 + p < len(inputs) else None
        if isinstance(f, str) and f in producer and insts[producer[f][0]][0] == "SamplePerfectTile":
            return [producer[f]]
    return None


def thread_groups(insts: Sequence[list], max_threads: int, warp: int = 32) -> tuple[ThreadGroup, ...]:
    """Thread and pipeline groups of a sketch from its plain-JSON instructions
    (``[kind, inputs, attrs, outputs]``).

    In a sketch with a ``warp_execution`` block (tensor-core sketches) a warp of ``warp``
    threads runs along ``threadIdx.x``, so a tiled ``threadIdx.y``/``z`` loop counts ``warp``
    threads per iteration: its bounds are the block's divided by ``warp``.
    """
    producer = _producers(insts)
    warp_execution = any(x[0] == "Annotate" and x[2] and x[2][0] == _WARP_KEY for x in insts)
    groups = []
    for i, inst in enumerate(insts):
        if inst[0] == "Annotate" and inst[2] and inst[2][0] == _PIPELINE_KEY:
            m = _split_members(insts, producer, inst[1][0])
            if m:
                groups.append(ThreadGroup(PIPELINE_AXIS, tuple(m), 2, NO_LIMIT))
            continue
        if inst[0] != "Bind":
            continue
        axis = str(inst[2][0])
        if not (axis.startswith("threadIdx") or axis.startswith("vthread")):
            continue
        m = _split_members(insts, producer, inst[1][0])
        if not m:
            continue
        low, high = 1, max_threads
        if axis.startswith("vthread"):
            high = MAX_VTHREAD
        else:
            for later in insts[i + 1:]:
                if later[0] == "Bind" and str(later[2][0]).startswith("threadIdx"):
                    break
                if later[0] == "Annotate" and later[2][0] == _LOW_KEY:
                    low = int(later[1][1])
                if later[0] == "Annotate" and later[2][0] == _HIGH_KEY:
                    high = min(high, int(later[1][1]))
        if warp_execution and axis.startswith("threadIdx") and axis != "threadIdx.x":
            low, high = -(-low // warp), high // warp
        groups.append(ThreadGroup(axis, tuple(m), low, high))
    return tuple(groups)


# ------------------------------------------------------------------------------------------
# shared memory
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SharedBuffer:
    """One shared-memory cache read: per dimension ``(shape, base, ((tile, |coef|), ...))``,
    its extent being ``min(shape, base + sum(coef * span(tile)))``; ``relaxed`` gives, per
    tile, the factor positions that vary inside the buffer's compute-at loop."""

    name: str
    elem_bytes: int
    dims: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]
    relaxed: tuple[tuple[int, tuple[int, ...]], ...]
    versions: int = 1  # copies kept by a software pipeline (max stage - min stage + 1)
    align: tuple[int, int, int] | None = None  # StorageAlign (axis, factor, offset): padded stride
    pool: str = ""  # "": static shared (summed); "dyn-read"/"dyn-write": merged shared.dyn phases


def total_bytes(sizes: Sequence[tuple[str, int]]) -> int:
    """What VerifyGPUCode counts, at most, for buffers of these (pool, bytes).

    Static ``shared`` buffers add up (exact). ``shared.dyn`` buffers (tensor-core sketches)
    go through ``StorageRewrite`` and ``MergeSharedMemoryAllocations``, which let the output
    staging reuse the memory of the input copies once they are dead, and start each buffer
    at a 64-byte boundary. Their reuse rules (size classes within 16x, one or several dead
    buffers) are not modelled; the sum of the 64-byte-aligned sizes is an upper bound on
    what they allocate, so the limit holds by construction, at the price of refusing some
    tensor-core tilings that reuse would have made fit (measured on fp16 matmuls: the bound
    is 1.0-2.2x the lowered size).
    """
    static = sum(n for pool, n in sizes if not pool)
    return static + sum(_align64(n) for pool, n in sizes if pool)


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
            extents = [min(shape, base + sum(c * span(factors[t], rel[t]) for t, c in terms))
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
    producer = _producers(insts)
    thread_bound: set[tuple[int, int]] = set()
    for inst in insts:
        if inst[0] == "Bind" and str(inst[2][0]).split(".")[0] in ("threadIdx", "vthread"):
            thread_bound |= set(_split_members(insts, producer, inst[1][0]) or ())
    buffers = []
    for i, inst in enumerate(insts):
        if inst[0] not in ("CacheRead", "CacheWrite") or inst[2][1] not in SHARED_SCOPES:
            continue
        cache_rv, consumer = inst[3][0], inst[1][0]
        mover = "ComputeAt" if inst[0] == "CacheRead" else "ReverseComputeAt"
        at = next((x for x in insts[i + 1:] if x[0] == mover and x[1][0] == cache_rv), None)
        if at is None:
            raise ValueError(f"instruction {i}: shared cache without {mover}")
        where = _split_members(insts, producer, at[1][1])
        if not where:
            raise ValueError(f"instruction {i}: cache placed at a loop that is not made of tile levels")
        reorder = next((x for x in insts[:i] if x[0] == "Reorder" and
                        set(where) <= {(_split_members(insts, producer, rv) or [None])[0] for rv in x[1]}), None)
        if reorder is None:
            raise ValueError(f"instruction {i}: cache placement loop not found in a Reorder")
        order = [(_split_members(insts, producer, rv) or [None])[0] for rv in reorder[1]]
        inside = set(order[max(order.index(m) for m in where) + 1:])
        buf = _buffer(trace, mod, insts, producer, consumer, int(inst[2][0]), inst[0] == "CacheWrite",
                      inside | thread_bound, i)
        stages = next((x[1][1] for x in insts if x[0] == "Annotate" and x[2] and x[2][0] == _PIPELINE_KEY
                       and set(where) & set(_split_members(insts, producer, x[1][0]) or ())), None)
        if stages:
            buf = replace(buf, versions=max(stages) - min(stages) + 1)
        align = next((x[2] for x in insts if x[0] == "StorageAlign" and x[1][0] == cache_rv), None)
        if align is not None:
            buf = replace(buf, align=(int(align[1]), int(align[2]), int(align[3])))
        if inst[2][1] == "shared.dyn":
            buf = replace(buf, pool="dyn-write" if inst[0] == "CacheWrite" else "dyn-read")
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

    producer = _producers(insts)
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


def _dtype_bits(dtype: str) -> int:
    import tvm

    return tvm.DataType(dtype).bits


def _realize(stmt: Any, name: str) -> Any:
    """The SBlockRealize of block ``name`` under ``stmt``."""
    todo = [stmt]
    while todo:
        s = todo.pop()
        if type(s).__name__ == "SBlockRealize" and str(s.block.name_hint) == name:
            return s
        for attr in ("block", "body", "then_case", "else_case"):
            child = getattr(s, attr, None)
            if child is not None and not isinstance(child, (int, str)):
                todo.append(child)
        todo.extend(getattr(s, "seq", None) or [])
    raise ValueError(f"block {name} not found")


# ------------------------------------------------------------------------------------------
# feasibility of tile factors
# ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=100_000)
def _divisors(n: int) -> tuple[int, ...]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return tuple(sorted(set(small + [n // i for i in small])))


@functools.lru_cache(maxsize=20_000)
def _completions(rest: int, k: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every ``k`` factors whose product is ``rest`` (the last one at most ``max_innermost``)."""
    if k == 0:
        return ((),) if rest == 1 else ()
    if k == 1:
        return ((rest,),) if max_innermost <= 0 or rest <= max_innermost else ()
    return tuple((d,) + tail for d in _divisors(rest) for tail in _completions(rest // d, k - 1, max_innermost))


class _Problem:
    """The limits of one sketch, over the tiles they involve."""

    def __init__(self, groups: Sequence[ThreadGroup], smem: SharedMemory | None,
                 tiles: dict[int, tuple]) -> None:
        self.groups = tuple(groups)
        self.smem = smem
        self.lows = tuple(g.low for g in self.groups)
        self.highs = tuple(g.high for g in self.groups)
        self.pos_group = {m: k for k, g in enumerate(self.groups) for m in g.members}
        involved = {t for g in self.groups for t, _ in g.members}
        self.rsets: dict[int, list[tuple[int, ...]]] = {}
        if smem is not None:
            for b in smem.buffers:
                for t, ps in b.relaxed:
                    involved.add(t)
                    if ps not in self.rsets.setdefault(t, []):
                        self.rsets[t].append(ps)
        self.order = tuple(sorted(involved))
        self._options: dict[tuple, list] = {}
        self.index = {t: i for i, t in enumerate(self.order)}
        self.tiles = {t: (tiles[t][0], tiles[t][1], tiles[t][2] if len(tiles[t]) > 2 else -1)
                      for t in self.order}
        # per buffer and dim: ((tile position in order, relax-set index, coef), ...)
        self.dims = []
        if smem is not None:
            for b in smem.buffers:
                rel = dict(b.relaxed)
                self.dims.append((b.pool, b.elem_bytes * b.versions, b.align, tuple(
                    (shape, base, tuple((self.index[t], self.rsets[t].index(rel[t]), c) for t, c in terms))
                    for shape, base, terms in b.dims)))

    def option(self, t: int, factors: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        g = [1] * len(self.groups)
        for p, f in enumerate(factors):
            k = self.pos_group.get((t, p))
            if k is not None:
                g[k] *= int(f)
        return tuple(g), tuple(span(factors, ps) for ps in self.rsets.get(t, ()))

    def options(self, t: int, prefix: tuple[int, ...], rest: int) -> list:
        """Pareto-minimal (group products, spans) of every completion of tile ``t`` (cached)."""
        key = (t, prefix, rest)
        hit = self._options.get(key)
        if hit is None:
            if len(self._options) > 50_000:
                self._options.clear()
            hit = self._options[key] = self._enumerate(t, prefix, rest)
        return hit

    def _enumerate(self, t: int, prefix: tuple[int, ...], rest: int) -> list:
        n, _, max_inner = self.tiles[t]
        best: dict[tuple, list[tuple]] = {}
        for tail in _completions(rest, n - len(prefix), max_inner):
            g, s = self.option(t, prefix + tail)
            if any(x > h for x, h in zip(g, self.highs)):
                continue
            kept = best.setdefault(g, [])
            if any(all(a <= b for a, b in zip(o, s)) for o in kept):
                continue
            kept[:] = [o for o in kept if not all(a <= b for a, b in zip(s, o))] + [s]
        out = [(g, s) for g, ss in best.items() for s in ss]
        out.sort(key=lambda o: (sum(o[1]), o[0]))
        return out

    def footprint(self, spans: Sequence[tuple[int, ...]]) -> int:
        sizes = []
        for pool, nbytes, align, dims in self.dims:
            extents = [min(shape, base + sum(c * spans[i][r] for i, r, c in terms)) for shape, base, terms in dims]
            sizes.append((pool, buffer_bytes(nbytes, extents, align)))
        return total_bytes(sizes)

    def feasible(self, opts: Sequence[list]) -> bool:
        """Whether one option per tile meets every group range and the shared-memory limit."""
        n_t, n_g = len(opts), len(self.groups)
        if any(not o for o in opts):
            return False
        # suffix bounds: largest group products, smallest spans still reachable
        max_g = [[1] * n_g for _ in range(n_t + 1)]
        min_s = [tuple(min(s[r] for _, s in o) for r in range(len(o[0][1]))) for o in opts]
        for i in range(n_t - 1, -1, -1):
            top = [max(g[k] for g, _ in opts[i]) for k in range(n_g)]
            max_g[i] = [min(NO_LIMIT, a * b) for a, b in zip(max_g[i + 1], top)]
        limit = self.smem.limit if self.smem is not None else None
        failed: set = set()

        def dfs(i: int, g: tuple, spans: list) -> bool:
            if i == n_t:
                return all(lo <= x for x, lo in zip(g, self.lows)) and \
                    (limit is None or self.footprint(spans) <= limit)
            key = (i, g, tuple(spans))
            if key in failed:
                return False
            for og, os_ in opts[i]:
                ng = tuple(a * b for a, b in zip(g, og))
                if any(x > h for x, h in zip(ng, self.highs)):
                    continue
                if any(x * m < lo for x, m, lo in zip(ng, max_g[i + 1], self.lows)):
                    continue
                if limit is not None and self.footprint(spans + [os_] + min_s[i + 1:]) > limit:
                    continue
                if dfs(i + 1, ng, spans + [os_]):
                    return True
            failed.add(key)
            return False

        return dfs(0, (1,) * n_g, [])


_PROBLEMS: dict[tuple, _Problem] = {}


def feasible_factors(groups: Sequence[ThreadGroup], tiles: dict[int, tuple],
                     done: dict[int, Sequence[int]], current: int, chosen: Sequence[int],
                     extent: int, candidates: Sequence[int],
                     smem: SharedMemory | None = None) -> list[int]:
    """The ``candidates`` for the next factor of tile ``current`` that keep every limit
    reachable: some completion of this and every unfinished tile meets every group range
    and the shared-memory limit.

    ``tiles`` maps each tile instruction to ``(n factors, static extent[, max innermost])``;
    ``done`` holds the factors of finished tiles; ``chosen`` the factors of ``current`` so far.
    """
    key = (tuple(groups), smem, tuple(sorted((t, tuple(v)) for t, v in tiles.items())))
    prob = _PROBLEMS.get(key)
    if prob is None:
        if len(_PROBLEMS) > 4096:
            _PROBLEMS.clear()
        prob = _PROBLEMS[key] = _Problem(groups, smem, tiles)
    if current not in prob.index:
        return list(candidates)
    base = []
    for t in prob.order:
        if t == current:
            base.append(None)
        elif t in done:
            base.append([prob.option(t, tuple(int(v) for v in done[t]))])
        else:
            ext = prob.tiles[t][1]
            if ext is None:
                return list(candidates)  # extent varies with earlier decisions: no constraint
            base.append(prob.options(t, (), ext))
    at = prob.index[current]
    prefix = tuple(int(v) for v in chosen)
    rest = extent // math.prod(prefix) if prefix else extent
    ok = []
    for d in candidates:
        opts = list(base)
        opts[at] = prob.options(current, prefix + (int(d),), rest // int(d))
        if prob.feasible(opts):
            ok.append(d)
    return ok
