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


# ---------------------------------------------------------------------------------------------
# Detection (collectors work): build a Hardware from the live machine.

#: ISA flags worth naming in a key's description and the TLM prompt, widest first.
_NOTABLE_ISA = ("avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "avx2", "fma",
                "avx", "sse4_2", "neon", "asimd", "sve")


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The notable ISA flags of this CPU (from /proc/cpuinfo), in a fixed order; () if unknown."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ()
    flags: set[str] = set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            flags.update(value.split())
            break
    return tuple(f for f in _NOTABLE_ISA if f in flags)


def _cpu_model_name(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.split(":")[0].strip() == "model name":
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def vector_bits_of(isa: tuple[str, ...]) -> int:
    """Widest SIMD register width in bits implied by the ISA flags."""
    if "avx512f" in isa:
        return 512
    if "avx2" in isa or "avx" in isa:
        return 256
    return 128


def physical_cores() -> int:
    """Physical cores this process may use (what MetaSchedule tunes with by default)."""
    import os

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        import psutil

        phys = psutil.cpu_count(logical=False) or usable
    except ImportError:  # psutil is a TVM requirement, but stay usable without it
        phys = usable
    return max(1, min(usable, phys))


def slug(text: str) -> str:
    """A key segment from free text: lower case, [a-z0-9_.] only ("NVIDIA H200" → "h200")."""
    words = re.sub(r"[^a-z0-9.]+", " ", text.lower()).split()
    words = [w for w in words if w not in ("nvidia", "corporation")]
    return "_".join(words) or "unknown"


def cpu_hardware(mcpu: str | None = None, cores: int | None = None, *, key: str | None = None) -> Hardware:
    """The Hardware of this machine's CPU (``mcpu``/``cores`` override what is detected)."""
    if mcpu is None:
        import tvm

        mcpu = str(tvm.target.codegen.llvm_get_system_cpu())
    if cores is None:
        cores = physical_cores()
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    isa = cpu_flags()
    derived = f"cpu-{slug(mcpu)}-{cores}c"
    return Hardware(
        key=key or derived,
        kind="cpu",
        arch=mcpu,
        cores=cores,
        vector_bits=vector_bits_of(isa),
        target={"kind": "llvm", "mcpu": mcpu, "num-cores": cores},
        description=f"{_cpu_model_name()} ({cores} cores)",
        isa=isa,
    )


def cuda_hardware(device_id: int = 0, *, key: str | None = None) -> Hardware:
    """The Hardware of CUDA GPU ``device_id`` (raises RuntimeError when there is none)."""
    import tvm

    dev = tvm.cuda(device_id)
    if not dev.exist:
        raise RuntimeError(f"no CUDA device {device_id} on this machine")
    return cuda_hardware_of(
        str(dev.device_name), str(dev.compute_version), int(dev.multi_processor_count),
        warp=int(dev.warp_size or 32), max_threads_per_block=int(dev.max_threads_per_block),
        max_shared_memory_per_block=int(dev.max_shared_memory_per_block), key=key,
    )


def cuda_hardware_of(name: str, compute_version: str, sms: int, *, warp: int = 32,
                     max_threads_per_block: int = 1024, max_shared_memory_per_block: int = 49152,
                     key: str | None = None) -> Hardware:
    """The Hardware of a GPU described by its facts ("NVIDIA H200", "9.0", 132 → cuda-sm_90-h200)."""
    major, _, minor = compute_version.partition(".")
    if not (major.isdigit() and (minor or "0").isdigit()):
        raise ValueError(f"compute capability {compute_version!r} is not like '9.0'")
    arch = f"sm_{major}{minor or '0'}"
    target = {
        "kind": "cuda",
        "arch": arch,
        "max_threads_per_block": max_threads_per_block,
        "max_shared_memory_per_block": max_shared_memory_per_block,
        "thread_warp_size": warp,
    }
    return Hardware(
        key=key or f"cuda-{arch}-{slug(name)}",
        kind="cuda",
        arch=arch,
        cores=sms,
        vector_bits=warp * 32,
        target=target,
        description=f"{name} ({sms} SMs, compute {major}.{minor or '0'})",
        isa=(),
    )


def cuda_available(device_id: int = 0) -> bool:
    """Whether TVM sees CUDA device ``device_id`` (False on CPU-only machines, never raises)."""
    try:
        import tvm

        return bool(tvm.cuda(device_id).exist)
    except Exception:  # noqa: BLE001 - a missing driver is just "no GPU"
        return False


def detect_hardware(kind: str = "cpu", *, key: str | None = None, cores: int | None = None,
                    device_id: int = 0) -> Hardware:
    """Hardware of this machine: ``kind`` is "cpu", "cuda" or "auto" (CUDA when present).

    ``key`` overrides the derived key (a user naming the platform) and must match
    ``HARDWARE_KEY_RE``; its ``cpu-``/``cuda-`` prefix also picks the kind. Same CPU model and
    core count give the same key on every machine, so measurements pool.
    """
    if key is not None:
        if not HARDWARE_KEY_RE.match(key):
            raise ValueError(f"hardware key {key!r} does not match {HARDWARE_KEY_RE.pattern}")
        kind = key.split("-", 1)[0]
    if kind == "auto":
        kind = "cuda" if cuda_available(device_id) else "cpu"
    if kind == "cpu":
        return cpu_hardware(cores=cores, key=key)
    if kind == "cuda":
        return cuda_hardware(device_id, key=key)
    raise ValueError(f"hardware kind {kind!r} is not 'cpu', 'cuda' or 'auto'")
