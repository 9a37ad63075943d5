"""Hardware facts for prompts, derived from the TVM target so every process writes the same words.

A record's hardware is stored as a key and a TVM target (storage's ``hardware`` table); the
CPU flags a live ``detect_hardware()`` reads from /proc/cpuinfo are not. To keep prompts a
function of what is stored, the ISA words of a CPU prompt come from LLVM's feature list for
the target's ``mcpu`` (the same for every machine with that CPU), not from the live flags.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Mapping

from collectors.hardware import Hardware, vector_bits_of

#: LLVM feature name -> the ISA word the prompt uses (collectors.hardware's flag names).
_LLVM_TO_ISA = {
    "sse4.2": "sse4_2", "avx": "avx", "avx2": "avx2", "fma": "fma", "avx512f": "avx512f",
    "avx512bw": "avx512bw", "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16", "amx-tile": "amx_tile", "amx-bf16": "amx_bf16",
    "amx-int8": "amx_int8", "neon": "neon", "sve": "sve", "sve2": "sve2", "dotprod": "dotprod",
}


@functools.lru_cache(maxsize=64)
def _isa_of_mcpu(mcpu: str) -> tuple[str, ...]:
    import tvm
    from tvm.target import codegen

    try:
        feats = set(codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": mcpu})))
    except Exception:  # noqa: BLE001 - an mcpu LLVM does not know: no ISA words
        return ()
    return tuple(sorted(_LLVM_TO_ISA[f] for f in feats if f in _LLVM_TO_ISA))


def isa_of(hw: Hardware) -> tuple[str, ...]:
    """ISA words of a CPU from its target's ``mcpu`` (LLVM features); () for a GPU."""
    if hw.kind != "cpu":
        return ()
    mcpu = str(hw.target.get("mcpu") or hw.arch or "")
    return _isa_of_mcpu(mcpu) if mcpu else tuple(hw.isa)


def hardware_from_index(key: str, target: Mapping[str, Any], description: str = "") -> Hardware:
    """A :class:`Hardware` rebuilt from a stored key, target and description.

    CPU: arch = ``mcpu``, cores = ``num-cores``, ISA from LLVM. GPU: arch from the target,
    SM count parsed from a description such as "NVIDIA H200 (132 SMs, compute 9.0)".
    """
    target = dict(target)
    kind = "cuda" if target.get("kind") == "cuda" else "cpu"
    if kind == "cpu":
        arch = str(target.get("mcpu", "generic"))
        isa = _isa_of_mcpu(arch)
        return Hardware(key=key, kind="cpu", arch=arch, cores=int(target.get("num-cores", 1)),
                        vector_bits=vector_bits_of(isa), target=target, description=description, isa=isa)
    m = re.search(r"(\d+)\s*SMs", description or "")
    warp = int(target.get("thread_warp_size", 32))
    return Hardware(key=key, kind="cuda", arch=str(target.get("arch", "unknown")),
                    cores=int(m.group(1)) if m else 0, vector_bits=warp * 32, target=target,
                    description=description)
