"""BLIS-style blocking of one block's loop nest for a CPU: the register micro-kernel, the cache
blocks and the parallel outer loops, from the hardware alone (vector lanes and registers, the
host's L1 and L2). The rule scheduler (:mod:`collectors.rules`) writes these factors into the
task's own sketch; this module knows nothing of traces, only a block's axes and the hardware.

The nest is MetaSchedule's CPU multi-level tiling, S0 S1 R0 S2 R1 S3 (spatial levels S, reduction
levels R): S2 is swept once per step of the outer reduction R0, S1 and S0 once in all. Why each
choice, and what it was measured against, is in the docstring of each function.
"""
from __future__ import annotations

import math
import os

from collectors.block_axes import BlockAxes
from collectors.hardware import Hardware, vector_registers
from collectors.tir import vector_lanes

#: Parallel chunks per core the outer spatial level aims for.
CHUNKS_PER_CORE = 8
#: Largest inner reduction factor (the L1 rule may choose less).
INNER_REDUCTION = 8
#: The sweep's micro-kernel of a matmul (one reduction loop) on a 32-register file (AVX-512): at
#: least this many rows of at most two vectors (8 x 32 floats: 16 accumulators) with an inner
#: reduction of 2 x INNER_REDUCTION, where the rows allow it. On a Rocket Lake (2026-12-05, runs
#: side by side) BERT-base's dense matmuls ran 1.13-1.15x (geomean of three runs) the
#: most-FMAs-per-load 4 x 64 at kc 8; 8 x 32 at kc 8 0.76-0.81x, 4 x 64 at kc 16 0.99-1.02x,
#: 16 x 16 0.88-0.96x: the taller tile pays only with the deeper kc. Not for convolutions: ResNet-50's
#: conv2d2 ran 0.68x so (5 other convolutions 0.8-1.2x).
SWEEP_ROWS_32 = 8
#: Rows of a micro-tile whose row is no vector (an output axis with no divisor up to the lanes:
#: GPT-2's 50,257-wide vocabulary): MetaSchedule's postprocessor vectorizes the innermost loop,
#: the tile's rows, into gathers a row of A and scatters a row of C apart. Rocket Lake, its three
#: vocabulary matmuls (32-128 rows), one call each: 16 rows 122-467 ms, 2 rows 28-112 ms (4.2-4.4x;
#: 1 row 3.3x; the corpus's best record of the 128-row one 129 ms). Not where the output axis is
#: one wide (EfficientNet-B0's squeeze convolutions, 1 x 1 images: their rows, the channels, lie
#: next to each other): capped there too, 30 of them ran 0.12-1.34x.
SCALAR_ROWS = 2
#: Used when the host's caches cannot be read (or the hardware is not this host).
DEFAULT_L1_BYTES = 32 * 1024
DEFAULT_L2_BYTES = 512 * 1024
DEFAULT_L2_WAYS = 8


def _cache_bytes(hardware: Hardware, index: int, default: int, fact: str = "size") -> int:
    """The host's cache ``index`` (its ``fact`` in sysfs: bytes, or ``ways_of_associativity``) when
    ``hardware`` is this host's kind of CPU (the same LLVM ``mcpu``); another key's rules (written
    here for a Zen 3, say) take ``default``."""
    from collectors.hardware import host_cpu_target

    path = f"/sys/devices/system/cpu/cpu0/cache/index{index}/{fact}"
    try:
        if hardware.kind == "cpu" and hardware.target.get("mcpu") == host_cpu_target().get("mcpu") \
                and os.path.exists(path):
            text = open(path).read().strip().upper()
            return int(text.rstrip("K")) * 1024 if text.endswith("K") else int(text)
    except (OSError, ValueError):
        pass
    return default


def l1_bytes(hardware: Hardware) -> int:
    """L1 data cache of the host (sysfs), or the default for a hardware that is not this host."""
    return _cache_bytes(hardware, 0, DEFAULT_L1_BYTES)


def l2_bytes(hardware: Hardware) -> int:
    """L2 cache of the host (sysfs index2), or the default for a hardware that is not this host."""
    return _cache_bytes(hardware, 2, DEFAULT_L2_BYTES)


def l2_ways(hardware: Hardware) -> int:
    """The L2's associativity (sysfs), or the default for a hardware that is not this host."""
    return _cache_bytes(hardware, 2, DEFAULT_L2_WAYS, "ways_of_associativity")


def resident_fits(rows: int, row_bytes: int, axes: BlockAxes, hardware: Hardware, line: int = 64) -> bool:
    """Whether a parallel chunk's share of B (``rows`` runs of ``row_bytes``) stays in the L2 while
    every block of rows reads it again: the resident plan's condition (:func:`blocked_plan`). A
    packed B is contiguous: half the L2 (GPT-2's 768 -> 50,304 LM head, 13 MB a chunk, made the whole
    model 1.07-1.14x slower with the plan). An unpacked B's rows lie a row apart: a quarter of the
    L2, and no L2 set holding more of their lines than half its ways (rows a multiple of 4 KB apart
    land in few sets). Rocket Lake (2 MB, 16 ways), two calls each: the 196 KB shares of BERT's and
    GPT-2's 768 x 768 dense 1.10-1.18x the sweep (attention-like 12 x 64 x 64 x 1024 and
    12 x 64 x 128 x 512 batched ones 1.18-1.55x); 590-786 KB shares (GPT-2's 768 x 2304, BERT's
    768 x 3072 and 3072 x 768) 0.5-0.75x; 128-295 KB shares whose rows are 4-6 KB apart (1024 and
    1536 wide) 0.47-0.6x."""
    import numpy as np

    l2 = l2_bytes(hardware)
    if axes.packed or rows * row_bytes > l2 // 4:
        return axes.packed and rows * row_bytes <= l2 // 2
    ways = l2_ways(hardware)
    sets = max(1, l2 // (line * ways))
    starts = np.arange(rows, dtype=np.int64)[:, None] * (4 * axes.row_elements)
    lines = (starts + np.arange(0, row_bytes, line, dtype=np.int64)[None, :]) // line
    return int(np.bincount((lines % sets).ravel(), minlength=sets).max()) <= max(1, ways // 2)


def micro_kernel(rows_extent: int, cols_extent: int, lanes: int, registers: int,
                 max_vectors: int = 4) -> tuple[int, int]:
    """The register tile ``(MR, NR)`` of a BLIS-style micro-kernel: ``MR`` rows of ``nv = NR /
    lanes`` vectors of accumulators. Measured on a Zen 3 (a 128x768x768 matmul, 20 tiles side by
    side): ``nv`` a power of two (a 3-vector row ran 2-10x slower) and the accumulators within
    half the register file (4x16 and 2x32 fastest, 6x16 and 8x16 1.3-1.5x slower: LLVM needs the
    other half for the loaded vectors, broadcasts and addresses). Among those, the most FMAs per
    value loaded (``MR * nv / (MR + nv)``), then the wider row. Both are divisors of their axes (a
    perfect tiling); an axis with no multiple of the lanes among its divisors gets its largest
    divisor up to one vector: one partial vector, never 1.75 of them (LLVM splits a 28-lane row
    into 16 + 8 + 4: 8 x 7 on a 14-wide image ran 1.3-1.9x 4 x 14 on a Zen 3's MobileNetV2
    convolutions; on a Rocket Lake 12 of 12 workloads so changed ran 1.0-8.4x, ResNet-50's 3x3
    conv2d2 8.0 -> 0.95 ms, GPT-2's 50,257-wide vocabulary matmuls 6x with no vector rather than
    29 lanes); rows of at most ``max_vectors`` vectors (AVX-512's sweep asks for two:
    :data:`SWEEP_ROWS_32`); a row of no vector (``NR`` 1 of a wider axis) at most :data:`SCALAR_ROWS` rows."""
    cols = [d for d in divisors(cols_extent) if d % lanes == 0 and (d // lanes) in (1, 2, 4)
            and d // lanes <= max_vectors] or [largest_divisor(cols_extent, lanes)]
    best, best_key = (1, cols[0]), (-1.0, 0)
    for nr in cols:
        nv = -(-nr // lanes)
        for mr in divisors(rows_extent):
            if mr * nv > registers // 2 or (nr == 1 < cols_extent and mr > SCALAR_ROWS):
                continue
            key = (mr * nv / (mr + nv), nr)
            if key > best_key:
                best, best_key = (mr, nr), key
    return best


#: The blocked plans (``rule_schedule(blocking=...)``; bench/studies/rules.py measures them side by side):
#: "sweep" puts the L2 block in S2, "panel" puts S2 = 1 and the rows innermost of S1, "auto"
#: (the default) takes the window plan where no vector pays (:func:`unvectorized`), else the
#: panel plan where it fits (:func:`panel_fits`), else the sweep; "resident" is "auto" with the
#: resident plan (:func:`blocked_plan`'s second point) wherever the tall sweep would run.
PLANS = ("auto", "sweep", "panel", "resident")


def panel_fits(k_total: int, nr: int, l1: int) -> bool:
    """Whether a block takes the panel plan: the micro-kernel writes vectors (``nr`` > 1) and the
    B micro-panel of the whole reduction (K x nr floats) fits the L1, so every row of micro-tiles
    reuses it from there. Measured on a Zen 3 (2026-12-05, the 20 quality tasks against
    MS@256): the panel plan 1.4-1.8x the sweep on BERT's attention matmuls (K 64 and 128) and
    MobileNetV2's 1x1 convolutions with a short reduction or a 7x7 image; 0.2-0.6x it on the
    dense matmuls of K 768-3072, whose unpacked B panels no cache holds.

    The panel plan's blocks of rows go to the parallel loop with the other axes' (S0), not to S1:
    a panel that fits the L1 costs little to load once per chunk, while a chunk holding every row
    block writes that many output streams at once (MobileNetV2's 1x1 convolution 16 -> 96 at
    112 x 112: 96 channel rows of 448 bytes, a plane apart). On a Rocket Lake (2026-12-06, the 20
    quality tasks, one call each, twice): that convolution 1.62x (249 -> 153 us, MS@256 148),
    its 14 x 14 ones 1.15-1.31x, the rest 0.95-1.08x, BERT's attention matmuls 0.99-1.05x."""
    return nr > 1 and 4 * k_total * nr <= l1


def unvectorized(axes: BlockAxes, plan_kind: str = "auto") -> bool:
    """Whether a block takes :func:`window_plan` (``plan_kind`` "auto" only; a forced plan writes
    its vectors): its vector-loaded input is read at a stride and no axis reuses a loaded vector
    (a depthwise convolution of stride 2: no register rows to pay for the gather)."""
    return plan_kind in ("auto", "resident") and axes.strided and axes.rows is None


#: window taps (the reduction's product) a :func:`window_plan` keeps whole in the innermost loops
WINDOW_TAPS = 64


def window_plan(axes: BlockAxes, hardware: Hardware, max_inner: int = 64, serial: bool = False) -> dict[int, list[int]]:
    """Loop index -> tiles of a block with no vector worth writing (:func:`unvectorized`): the
    outputs scalar, each computed over its whole window innermost (the rule scheduler takes the
    sketch's largest unroll), two outputs of a row at a time sharing the window's weights,
    the row's other outputs next, the outer axes over the cores. Measured on a Rocket Lake
    (EfficientNet-B0's 5x5 stride-2 depthwise convolution, 144 channels, 28x28 out; one call):
    355 us as the blocked plan wrote it (a 14-lane vector gathering every other input), 92 us so,
    82 us MetaSchedule@256's best (the same shape of program); unrolled 64 steps only, 250 us."""
    plan: dict[int, list[int]] = {}
    taps = math.prod(e for e, r in zip(axes.extents, axes.reduce) if r)
    for i, r in enumerate(axes.reduce):
        if r:
            cap = axes.extents[i] if taps <= WINDOW_TAPS else INNER_REDUCTION
            inner = largest_divisor(axes.extents[i], min(cap, max_inner))
            plan[i] = [axes.extents[i] // inner, inner]
    spatial = [i for i, r in enumerate(axes.reduce) if not r]
    row = max((i for i in spatial if i < axes.vector), default=None)  # the output row before the contiguous axis
    parallel_left = 1 if serial else hardware.cores * CHUNKS_PER_CORE
    for i in spatial:
        e = axes.extents[i]
        if i == axes.vector:
            plan[i] = [1, 1, e, 1] if serial else [1, e, 1, 1]
            continue
        t3 = largest_divisor(e, 2) if i == row else 1
        t2 = largest_divisor(e // t3, 8) if i == row else 1
        rest = e // (t3 * t2)
        t0 = largest_divisor(rest, parallel_left)
        parallel_left = max(1, parallel_left // t0)
        plan[i] = [1, 1, rest * t2, t3] if serial else [t0, rest // t0, t2, t3]
    return plan


#: MetaSchedule's CPU sketches vectorize the innermost loops fused up to this many elements
#: (``ParallelizeVectorizeUnroll``'s ``max_vectorize_extent``): the widest plane a vector spans.
PLANE_VECTOR = 64


def whole_plane(axes: BlockAxes, lanes: int) -> bool:
    """Whether a block takes :func:`plane_plan`: a pointwise contraction (one reduction loop
    longer than 1: a 1x1 convolution) with rows to reuse a vector, its output plane contiguous
    (:attr:`BlockAxes.plane`) and at most :data:`PLANE_VECTOR` long, and a vector over the whole
    plane filling more of its lanes than one over the row (49 of 64 against 7 of 16 on a 7 x 7
    image with AVX-512; 49 of 56 against 7 of 8 with AVX2: no gain to read, not taken)."""
    if axes.plane is None or axes.rows is None or axes.strided:
        return False
    if sum(1 for e, r in zip(axes.extents, axes.reduce) if r and e > 1) != 1:
        return False
    width, run = axes.extents[axes.vector], axes.extents[axes.plane] * axes.extents[axes.vector]

    def filled(n: int) -> float:
        return n / (-(-n // lanes) * lanes)
    return run <= PLANE_VECTOR and filled(run) > filled(width)


def plane_plan(axes: BlockAxes, hardware: Hardware, max_inner: int = 64) -> dict[int, list[int]]:
    """Loop index -> tiles of a :func:`whole_plane` block, as MetaSchedule's search writes its
    7 x 7 1x1 convolutions: each output channel's whole plane one vector run innermost (S3),
    a block of channels (S2) whose accumulator planes take half the L1, swept once per inner
    reduction of :data:`INNER_REDUCTION` input channels that every channel of the block reuses,
    the blocks of channels over the cores (S1; at least one per core).

    The rules' micro-kernel there was 16 channels x one 7-wide row: one vector of 7 of 16 lanes.
    Measured on an Emerald Rapids (2026-12-06, ``python -m bench.studies.plane``, the 22 zoo and
    judging-set tasks it changes, two calls each; ``bench/results/plane-emeraldrapids-2c.md``):
    **1.67x** the rules' program without it (1.12-2.15x, faster on every task; MobileNetV2's
    `conv2d28` 330 -> 170 us, MS@256 174), 1.15x MS@256 on the 5 judged where the rows were 0.65x.
    Explored first: the same plan on 3x3 and depthwise convolutions at 7 x 7 (their planes are
    read at the taps' offsets: :attr:`BlockAxes.plane` None) 0.24-0.8x; register tiles of 2 or 4
    channels x the plane 0.1-0.5x; blocks of a quarter and an eighth of the L1 below the half.
    """
    plan: dict[int, list[int]] = {}
    for i, (e, r) in enumerate(zip(axes.extents, axes.reduce)):
        if r:
            k1 = largest_divisor(e, min(INNER_REDUCTION, max_inner))
            plan[i] = [e // k1, k1]
        else:
            plan[i] = [1, 1, 1, e] if i in (axes.plane, axes.vector) else [1, e, 1, 1]
    run = axes.extents[axes.plane] * axes.extents[axes.vector]
    rows = axes.extents[axes.rows]
    block = largest_divisor(rows, max(1, min(l1_bytes(hardware) // 2 // (4 * run), rows // hardware.cores)))
    plan[axes.rows] = [1, rows // block, block, 1]
    return plan


def blocked_plan(axes: BlockAxes, hardware: Hardware, max_inner: int = 64, serial: bool = False,
                  plan_kind: str = "auto", planes: bool = True, inner_reduction: int = INNER_REDUCTION,
                  chunks_per_core: int = CHUNKS_PER_CORE) -> dict[int, list[int]]:
    """Loop index -> tile factors (outer to inner) of the blocked plan (``plan_kind`` one of
    :data:`PLANS`; the module docstring says what each level holds). The nest is MetaSchedule's
    S0 S1 R0 S2 R1 S3: S2 is swept once per step of the outer reduction R0, S1 and S0 once in all.

    * the inner reduction R1 at most ``inner_reduction`` (:data:`INNER_REDUCTION`; B is not
      packed: its kc rows, a row stride apart, often a multiple of 4 KB, share one L1 set; kc 64
      ran 1.2-10x slower than 8-16 on the Zen 3, kc as deep as the rows' distinct L1 sets allow
      0.88x kc <= 8); a packed B (:attr:`BlockAxes.packed`, a deployer's layout-free weight) as
      deep as the L1 rule allows: BERT's 768 x 3072 dense 2.01 -> 1.79-1.87 ms at kc 64 (Rocket Lake);
    * under AVX-512's tall micro-tile, the resident plan: no sweep (S2 = 1), each micro-tile's
      accumulators held over the whole reduction at kc ``inner_reduction`` (MetaSchedule@1000's
      program of BERT's 768 x 768 dense), where a parallel chunk's share of B stays in the L2 while
      every row block reads it again (:func:`resident_fits`). Rocket Lake, two calls each: BERT's
      three dense layers packed 1.04-1.2x the kc 64 sweep (768 -> 3072 1,918 / 1,944 -> 1,732 /
      1,685 us; kc 16 and 64 so 0.9-1.0x); unpacked, BERT's and GPT-2's 768 x 768 ones 1.10-1.18x
      the sweep (BERT's 601 / 588 -> 520 / 523 us, MetaSchedule@1000's program 513 / 522);
    * a row that is not a whole number of vectors is one partial vector, in every plan
      (:func:`micro_kernel`: 8 x 7 on a 14-wide image, not 4 x 14);
    * ``serial``: nothing parallel: S0 and S1 1 (the postprocessor fuses the outer spatial
      loops into the parallel one), everything in S2;
    * a convolution (several reduction loops) that takes no panel plan takes no sweep either
      ("auto" only): S2 = 1 and the inner reduction as deep as the L1 rule allows, not
      :data:`INNER_REDUCTION`. The sweep reloads its block of accumulators every ``kc`` steps,
      and a convolution's ``kc`` came out 6 (3 taps x 2 channels): one load and one store per three
      FMAs. Measured on a Rocket Lake (ResNet-50's six convolutions that took the sweep, one call
      each): 1.12-3.2x (its 3x3 ``conv2d10`` 2.75 -> 0.87 ms, the corpus's best 0.88 ms); a deep
      inner reduction in the panel plan too ran 0.88-1.16x: not there.
    """
    if unvectorized(axes, plan_kind):
        return window_plan(axes, hardware, max_inner, serial)
    auto = plan_kind in ("auto", "resident")
    lanes = vector_lanes(hardware.vector_bits, "float32")
    if planes and auto and not serial and whole_plane(axes, lanes):
        return plane_plan(axes, hardware, max_inner)
    regs = vector_registers(hardware)
    rows_ext = axes.extents[axes.rows] if axes.rows is not None else 1
    mr, nr = micro_kernel(rows_ext, axes.extents[axes.vector], lanes, regs)
    k_total = math.prod(e for e, r in zip(axes.extents, axes.reduce) if r)
    l1, l2 = l1_bytes(hardware), l2_bytes(hardware)
    # a reduction with no divisor up to INNER_REDUCTION (ViT's 197 tokens) leaves the sweep one
    # step deep (kc = 1): it re-sweeps its block K times; the panel plan ran 2.8x it (Rocket Lake)
    unsplittable = all(largest_divisor(e, INNER_REDUCTION) == 1 for e, r in zip(axes.extents, axes.reduce) if r)
    panel = plan_kind == "panel" or (auto and (panel_fits(k_total, nr, l1) or (nr > 1 and unsplittable)))
    deep = auto and sum(axes.reduce) > 1 and not panel and not serial  # the docstring's last point
    tall = False
    if regs >= 32 and sum(axes.reduce) == 1 and not serial and not panel:  # AVX-512's matmul sweep: taller, deeper kc
        kernel = micro_kernel(rows_ext, axes.extents[axes.vector], lanes, regs, max_vectors=2)
        if kernel[0] >= SWEEP_ROWS_32:
            (mr, nr), tall = kernel, True
    inner = {i: 1 for i, r in enumerate(axes.reduce) if not r}
    inner[axes.vector] = nr
    if axes.rows is not None:
        inner[axes.rows] = mr
    spatial = [i for i, r in enumerate(axes.reduce) if not r]
    chunks = _chunks(axes, spatial, inner, hardware.cores * chunks_per_core)
    # the tall micro-tiles each over the whole reduction (the docstring's second point) where a chunk's
    # share of B, which every block of rows reads again, stays in the L2
    resident = tall and (plan_kind == "resident" or plan_kind == "auto" and resident_fits(
        k_total, 4 * axes.extents[axes.vector] // chunks[axes.vector], axes, hardware))
    inner_reduction = 2 * inner_reduction if tall and not resident else inner_reduction
    plan: dict[int, list[int]] = {}
    l1_rule = l1 // 2 // (4 * (mr + nr))  # both micro-panels within half the L1
    k_left = max(1, l1_rule if deep or (axes.packed and not resident) else min(inner_reduction, l1_rule))
    kc = 1
    for i in reversed(range(len(axes.extents))):
        if axes.reduce[i]:
            k1 = largest_divisor(axes.extents[i], min(k_left, max_inner))
            k_left = max(1, k_left // k1)
            kc *= k1
            plan[i] = [axes.extents[i] // k1, k1]
    if serial:
        for i in spatial:
            rest = axes.extents[i] // inner[i]
            plan[i] = [1, 1, rest, inner[i]]  # S0 and S1 would be fused into a parallel loop
        return plan
    if panel:
        for i in spatial:
            if i == axes.rows:
                continue
            rest = axes.extents[i] // inner[i]
            t1 = largest_divisor(rest, max(1, l2 // 2 // (4 * k_total * nr))) if i == axes.vector else 1
            plan[i] = [rest // t1, t1, 1, inner[i]]
        if axes.rows is not None:  # each block of rows a parallel chunk (panel_fits), unless _rows_reread_most
            blocks = axes.extents[axes.rows] // mr
            t0 = blocks if not _rows_reread_most(axes, plan, spatial, l2) else \
                largest_divisor(blocks, max(1, -(-hardware.cores * chunks_per_core // math.prod(plan[i][0] for i in spatial if i != axes.rows))))
            plan[axes.rows] = [t0, blocks // t0, 1, mr]
        return plan
    for i, t0 in chunks.items():  # the sweep's chunks (the panel plan: a block of rows each)
        rest = axes.extents[i] // inner[i] // t0
        if deep or resident:
            t2 = 1
        elif i == axes.vector:  # columns of micro-tiles whose B panels (kc x nr each) share half the L2
            t2 = largest_divisor(rest, max(1, l2 // 2 // (4 * kc * nr)))
        elif i == axes.rows:  # rows of micro-tiles whose A panels (mr x kc each) share a quarter of it
            t2 = largest_divisor(rest, max(1, l2 // 4 // (4 * kc * mr)))
        else:
            t2 = 1
        plan[i] = [t0, rest // t2, t2, inner[i]]
    if mr == 1 and nr > 1:
        _one_row_block_in_l1(plan, axes, l1)
    return plan


def _rows_reread_most(axes: BlockAxes, plan: dict[int, list[int]], spatial: list[int], l2: int) -> bool:
    """Whether a panel plan's chunk of rows reads more again than a chunk of the other loops it
    splits (:attr:`BlockAxes.reread`), and more than half the L2: a 1x1 convolution's rows are its
    output channels, and each block of them re-read the whole image (ResNet-50's 256 -> 128
    channels on 56 x 56: 3.2 MB eight times). Then the rows' blocks go serial (S1) inside the other
    loops' chunks, split only as far as those leave too few chunks. Rocket Lake, every corpus
    workload it changed, one call each: the 11 whose rows re-read over half the L2 1.06-1.78x
    (ResNet-50's ``conv2d5`` 2,004 -> 1,147 us, the corpus's best 1,145); below it 0.72-1.26x
    (EfficientNet-B0's 784 KB ``conv2d3`` 0.67-0.72x in three calls): left as they were. What a
    block re-reads is its share of the parallel loops outside the rows (a batch matmul's head)."""
    split = [axes.reread[i] for i in spatial if i != axes.rows and plan[i][0] > 1]
    if not axes.reread or not split or axes.reread[axes.rows] <= min(split):
        return False
    # the parallel loops outside the rows (a batch matmul's heads) give each its own part to re-read
    outer = math.prod(plan[i][0] for i in spatial if i < axes.rows)
    return 4 * axes.reread[axes.rows] // outer > l2 // 2


def _one_row_block_in_l1(plan: dict[int, list[int]], axes: BlockAxes, l1: int) -> None:
    """A sweep whose micro-tile is one row of vectors (ViT's 197 tokens are prime) narrows its
    column block (S2 of the vector axis) until the block of accumulators it reloads every outer
    reduction step fits the L1, or one column of micro-tiles is left: a one-row tile gets no
    taller kernel's deeper ``kc``, so the reloads are its largest stream. ViT-B/16's MLP matmul
    197 x 3072 x 768 on a Rocket Lake: 148 KB of accumulators in S2, 5.27-5.39 ms; one column of
    micro-tiles (50 KB), 3.63-3.69 ms; MS@256's best 3.96-4.11 ms (one call, twice). Taller tiles
    lost to it (LLaMA's 8-row matmul 0.70x, BERT's 0.98x): they keep their blocks."""
    spatial = [i for i, r in enumerate(axes.reduce) if not r]
    others = math.prod(plan[i][2] * plan[i][3] for i in spatial if i != axes.vector)
    t0, t1, t2, nr = plan[axes.vector]
    fits = largest_divisor(t2, max(1, l1 // (4 * others * nr)))
    plan[axes.vector] = [t0, t1 * (t2 // fits), fits, nr]


def _chunks(axes: BlockAxes, spatial: list[int], inner: dict[int, int], parallel: int) -> dict[int, int]:
    """Per spatial loop, its parallel chunks (the sweep's S0): in :func:`_split_order`, the largest
    divisor of its micro-tiles up to what the loops split before it left of ``parallel``."""
    out = {}
    for i in _split_order(axes, spatial):
        out[i] = largest_divisor(axes.extents[i] // inner[i], parallel)
        parallel = max(1, parallel // out[i])
    return out


def _split_order(axes: BlockAxes, spatial: list[int]) -> list[int]:
    """The order the sweep splits the spatial loops over the cores in: first those whose chunks
    read the least again (:attr:`BlockAxes.reread`), ties outermost first. A matmul whose B is the
    larger input (BERT's dense layers) is split over its columns: each core streams its own part
    of B. 1.17-1.73x the rows first on BERT-base's dense matmuls (Rocket Lake, 2026-12-05)."""
    if not axes.reread:
        return list(spatial)
    return sorted(spatial, key=lambda i: (axes.reread[i], spatial.index(i)))


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in divisors(n) if d <= max(1, at_most))
