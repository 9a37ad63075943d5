"""Small TVM glue every layer above storage shares: targets, modules, JSON of TVM objects.

One home each, so the tuner, the tensor language, the MetaSchedule database interop and the
whole-model compile all convert the same way:

- :func:`as_target` — a ``tvm.target.Target`` from a Target, a dict or a ``Hardware``;
- :func:`as_module` — an IRModule with one ``main`` PrimFunc (MetaSchedule's unit);
- :func:`load_module` — that module from its stored form (``tvm.ir.save_json`` text, else
  TVMScript), as the index keeps it;
- :func:`workload_key` — a task's identity: MetaSchedule's structural hash as 16 hex digits;
- :func:`plain_json` / :func:`trace_json` — TVM's ``as_json`` values (IntImm, String, Array,
  Map) as plain Python JSON.

TVM is imported inside the functions: ``import tvm`` costs seconds and most callers of this
module's users (the CLI's argument parsing, storage) never need it.
"""
from __future__ import annotations

import functools
from typing import Any, Iterator, Mapping

_MASK64 = (1 << 64) - 1


def as_target(target: Any):
    """A ``tvm.target.Target`` from a Target, a dict (``{"kind": "llvm", ...}``) or a Hardware."""
    import tvm

    if hasattr(target, "tvm_target") and callable(target.tvm_target):  # collectors.hardware.Hardware
        return target.tvm_target()
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, dict):
        return tvm.target.Target(target)
    raise TypeError(f"target must be a tvm Target, a dict or a Hardware, got {target!r}")


def as_module(mod: Any):
    """An IRModule with one ``main`` PrimFunc, from an IRModule or a PrimFunc."""
    import tvm

    if isinstance(mod, tvm.tirx.PrimFunc):
        return tvm.IRModule({"main": mod.with_attr("global_symbol", "main")})
    if isinstance(mod, tvm.IRModule):
        return mod
    raise TypeError(f"expected an IRModule or a PrimFunc, got {type(mod).__name__}")


def schedule_of(mod: Any, trace: str | list, *, checked: bool = False) -> Any:
    """The Schedule a stored, postprocessed trace gives on ``mod`` (an IRModule or PrimFunc):
    ``trace`` as JSON text (a record's ``trace_json``) or its plain-JSON value. ``checked`` has
    TVM verify the IR after every primitive, for a trace that came from outside (an endpoint)."""
    import json

    from tvm.s_tir.schedule import Schedule, Trace

    sch = Schedule(as_module(mod), debug_mask="all" if checked else "none")
    Trace.apply_json_to_schedule(json.loads(trace if isinstance(trace, str) else json.dumps(trace)), sch)
    return sch


def load_module(row: Mapping[str, Any]):
    """The IRModule of a stored workload (an index ``workloads`` row or any mapping with
    ``mod_json`` and/or ``tvmscript``).

    ``mod_json`` is exact (names included) and wins; TVMScript is parsed otherwise, and a bare
    PrimFunc is wrapped as ``main``. Raises ``ValueError`` naming the workload when neither is
    usable, so callers decide whether to skip it or stop.
    """
    import tvm

    name = row.get("workload_key", "?")
    if row.get("mod_json"):
        return tvm.ir.load_json(row["mod_json"])
    if row.get("tvmscript"):
        try:
            mod = tvm.script.from_source(row["tvmscript"])
        except Exception as exc:  # noqa: BLE001 - TVM's parser raises many kinds
            raise ValueError(f"workload {name}: its TVMScript does not parse: {str(exc)[:200]}") from exc
        return mod if isinstance(mod, tvm.IRModule) else tvm.IRModule({"main": mod})
    raise ValueError(f"workload {name} has neither mod_json nor tvmscript")


def workload_key(mod: Any) -> str:
    """16 hex digits of ``tvm_ffi.structural_hash(mod)`` (an IRModule with one ``main`` PrimFunc).

    This is MetaSchedule's workload shash (checked on TVM 0.27:
    ``Workload(mod).as_json()[0] == str(structural_hash(mod))``). A bare PrimFunc is wrapped as
    ``IRModule({"main": func})`` first, the way MetaSchedule does.
    """
    import tvm
    import tvm_ffi

    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"workload_key needs an IRModule or PrimFunc, got {type(mod).__name__}")
    return f"{tvm_ffi.structural_hash(mod) & _MASK64:016x}"


def plain_json(obj: Any) -> Any:
    """``as_json()`` output made JSON-serialisable (IntImm/FloatImm/String/Array/Map → Python)."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [plain_json(x) for x in obj]
    if isinstance(obj, dict):
        return {str(plain_json(k)): plain_json(v) for k, v in obj.items()}
    value = getattr(obj, "value", None)
    if value is not None and isinstance(value, (bool, int, float)):
        dtype = str(getattr(obj, "dtype", ""))
        return bool(value) if dtype == "bool" else value
    if hasattr(obj, "items"):  # tvm Map
        return {str(plain_json(k)): plain_json(v) for k, v in obj.items()}
    if hasattr(obj, "__iter__") and not isinstance(obj, (bytes, bytearray)):  # tvm Array
        return [plain_json(x) for x in obj]
    return str(obj)


def trace_json(trace: Any) -> list:
    """A trace as plain JSON ``[insts, decisions]`` (postprocessing instructions kept)."""
    return plain_json(trace.as_json())


def trace_text(trace_json_: list) -> str:
    """A trace's plain JSON as a record stores it (``Record.trace_json``, the record id's input)."""
    import json

    return json.dumps(trace_json_, separators=(",", ":"))


@functools.lru_cache(maxsize=1)
def tvm_version() -> str:
    """``tvm.__version__``, stored with every record."""
    import tvm

    return str(tvm.__version__)


def block_realizes(stmt: Any, loops: tuple = ()) -> Iterator[tuple[Any, tuple]]:
    """Every ``SBlockRealize`` under a TIR statement with the ``For`` loops around it, outermost
    first (nested blocks too)."""
    kind = type(stmt).__name__
    if kind == "For":
        yield from block_realizes(stmt.body, loops + (stmt,))
        return
    if kind == "SBlockRealize":
        yield stmt, loops
        yield from block_realizes(stmt.block.body, loops)
        return
    for child in getattr(stmt, "seq", None) or ():
        yield from block_realizes(child, loops)
    for attr in ("body", "then_case", "else_case"):
        child = getattr(stmt, attr, None)
        if child is not None and type(child).__module__.startswith("tvm"):
            yield from block_realizes(child, loops)


def io_bytes(mod: Any) -> int:
    """Bytes of the buffers a PrimFunc (or its one-function module) reads or writes and does not
    allocate itself: the memory one run must at least touch."""
    import math

    func = next(iter(mod.functions.values())) if hasattr(mod, "functions") else mod
    seen, local = {}, set()
    for realize, _ in block_realizes(func.body):
        block = realize.block
        local.update(b.name for b in block.alloc_buffers)
        for region in list(block.reads) + list(block.writes):
            buf = region.source
            if all(hasattr(x, "value") for x in buf.shape):
                seen[buf.name] = math.prod(int(x.value) for x in buf.shape) * max(1, dtype_bits(str(buf.dtype)) // 8)
    return sum(v for k, v in seen.items() if k not in local)


def is_reduction(iter_var: Any) -> bool:
    """Whether a block iterator is a reduction (``IterVar.CommReduce``)."""
    return int(iter_var.iter_type) == 2


def dtype_bits(dtype: str) -> int:
    """Bits of a scalar dtype (``float32`` 32, ``int8x4`` 8, ``bool`` 8); 0 when it names none."""
    import re

    if dtype == "bool":
        return 8
    m = re.search(r"\d+", dtype)
    return int(m.group()) if m else 0


def vector_lanes(vector_bits: int, dtype: str) -> int:
    """Elements of ``dtype`` one ``vector_bits``-wide register holds (at least 1; an unknown dtype
    counts as 32 bits): what a loop must cover to fill one vector."""
    return max(1, int(vector_bits) // max(8, dtype_bits(dtype) or 32))


#: the most values of :func:`shared_iterators` a register tile may span before it is a failure
#: (``collectors.failure_modes``' ``no_reuse``; healthy decoding's ``reuse`` rule): on the Zen 3
#: corpus the best record of 22 of 23 depthwise convolutions and batched matmuls held 1 or 2
SHARED_TILE_MAX = 2


def shared_iterators(block: Any) -> list[int]:
    """Positions of the block's spatial iterators that index every buffer it reads besides the one
    it writes (at least two such buffers): a batched matmul's head, a depthwise convolution's
    channel. A register tile spanning several of their values reuses no load: each value has its
    own operands (``collectors.failure_modes``' ``no_reuse``)."""
    from tvm.tirx.analysis import undefined_vars

    out = block.writes[0].source if block.writes else None
    inputs = [r for r in block.reads if out is None or not r.source.same_as(out)]
    if len(inputs) < 2:
        return []
    read_by = [set().union(*(undefined_vars(rg.min) for rg in r.region)) for r in inputs]
    return [i for i, iv in enumerate(block.iter_vars)
            if not is_reduction(iv) and all(iv.var in vs for vs in read_by)]


def contiguous_axis(block: Any) -> tuple[int | None, list]:
    """The position of the block iterator the last (stride-1) index of the block's output depends
    on (None unless exactly one, spatial one does), and the block's reads of other buffers whose
    last index depends on it too: the inputs a vector along the output's contiguous axis loads."""
    from tvm.tirx.analysis import undefined_vars

    if not block.writes or not len(block.writes[0].region):
        return None, []
    write = block.writes[0]
    ivs = list(block.iter_vars)
    position = {iv.var: i for i, iv in enumerate(ivs)}
    last = [position[v] for v in undefined_vars(write.region[-1].min) if v in position]
    if len(last) != 1 or is_reduction(ivs[last[0]]):
        return None, []
    var = ivs[last[0]].var
    loaded = [r for r in block.reads if not r.source.same_as(write.source) and len(r.region)
              and var in set(undefined_vars(r.region[-1].min))]
    return last[0], loaded
