"""MetaSchedule interop: workload keys, JSON-database import and export.

The only storage module that touches TVM, and only inside functions (``import tvm`` costs
seconds; ``import storage`` must not).

Workload key: MetaSchedule's ``Workload`` stores ``shash = tvm_ffi.structural_hash(mod)`` as an
unsigned decimal string (checked on TVM 0.27: ``Workload(mod).as_json()[0] ==
str(tvm_ffi.structural_hash(mod))``). ``workload_key(mod)`` is the same number as 16 lowercase
hex digits, so a key converts to MetaSchedule's shash and back without TVM
(:func:`key_from_shash`, :func:`shash_from_key`).
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

_MASK64 = (1 << 64) - 1


def workload_key(mod: Any) -> str:
    """16 hex digits of ``tvm_ffi.structural_hash(mod)`` (an IRModule with one ``main`` PrimFunc).

    A bare PrimFunc is wrapped as ``IRModule({"main": func})`` first, the way MetaSchedule does.
    """
    import tvm
    import tvm_ffi

    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    if not isinstance(mod, tvm.IRModule):
        raise TypeError(f"workload_key needs an IRModule or PrimFunc, got {type(mod).__name__}")
    return f"{tvm_ffi.structural_hash(mod) & _MASK64:016x}"


def key_from_shash(shash: str | int) -> str:
    """MetaSchedule's decimal workload shash -> our 16-hex workload key."""
    return f"{int(shash) & _MASK64:016x}"


def shash_from_key(key: str) -> str:
    """Our 16-hex workload key -> MetaSchedule's decimal workload shash."""
    return str(int(key, 16))
