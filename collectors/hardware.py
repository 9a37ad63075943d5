"""Hardware identity: one measurement platform, named by a derived key.

A key is derived from what the machine is, never typed by hand (DESIGN.md section 3):
``cpu-<mcpu>-<N>c`` for a CPU (LLVM's ``mcpu`` and the core count used for tuning) and
``cuda-<sm_XX>-<gpu name slug>`` for a GPU. Two machines with the same CPU model and core
count get the same key, so their measurements pool. ``detect_hardware()`` (added by the
collectors work) builds a :class:`Hardware` from the live machine; this module holds the
value type every layer shares.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

#: Shape every hardware key must have; storage checks the same pattern.
HARDWARE_KEY_RE = re.compile(r"^(cpu|cuda)-[a-z0-9_.]+(-[a-z0-9_.]+)*$")


@dataclass(frozen=True)
class Hardware:
    """One measurement platform: its key, its TVM target and the facts the TLM prompt uses."""

    key: str  # e.g. "cpu-znver4-2c" or "cuda-sm_90-h200"
    kind: str  # "cpu" or "cuda"
    arch: str  # LLVM mcpu for a CPU ("znver4"), "sm_90" for a GPU
    cores: int  # cores used for tuning (CPU) or streaming multiprocessors (GPU)
    vector_bits: int  # widest SIMD register (CPU, e.g. 512 for AVX-512) or warp size * 32 (GPU)
    target: dict[str, Any] = field(default_factory=dict)  # TVM target as a dict (string form is rejected)
    description: str = ""  # human words: CPU model name or GPU name
    isa: tuple[str, ...] = ()  # notable ISA flags (avx2, avx512f, ...) or () for a GPU

    def __post_init__(self) -> None:
        if not HARDWARE_KEY_RE.match(self.key):
            raise ValueError(f"hardware key {self.key!r} does not match {HARDWARE_KEY_RE.pattern}")
        if self.kind not in ("cpu", "cuda"):
            raise ValueError(f"hardware kind {self.kind!r} is not 'cpu' or 'cuda'")

    def tvm_target(self):
        """The ``tvm.target.Target`` to tune and build for (imports TVM lazily: it is slow)."""
        import tvm

        return tvm.target.Target(self.target)
