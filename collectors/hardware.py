"""Hardware identity: one measurement platform, named by a derived key.

A key is derived from what the machine is, never typed by hand (docs/ARCHITECTURE.md, "Hardware identity"):
``cpu-<mcpu>-<N>c`` for a CPU (LLVM's ``mcpu`` and the core count used for tuning) and
``cuda-<sm_XX>-<gpu name slug>`` for a GPU. Two machines with the same CPU model and core
count get the same key, so their measurements pool.

One home for each hardware fact:

- the key rule (:func:`cpu_key`, :func:`cuda_key`, and :func:`key_of_target` for a stored or
  imported TVM target): live detection and a MetaSchedule database import give one machine
  the same key; the key's shape (``HARDWARE_KEY_RE``) is storage's, which validates paths;
- the ISA: LLVM's feature list for the target's ``mcpu`` (:func:`isa_of_mcpu`), so a
  ``Hardware`` rebuilt from the index (:func:`hardware_from_index`) has the same ISA words as the
  live machine had;
- what this host can run (:func:`check_runs_here`): code may be *written* for any key (encoded,
  lowered, verified anywhere), but it is *run* — measured, checked for the right answer — only
  on a host whose CPU has every instruction-set feature of the target (or a CUDA GPU), and
  otherwise refused with an error naming both, before anything runs.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from storage.schema import HARDWARE_KEY_RE


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

#: LLVM feature name -> the ISA word prompts and descriptions use.
_LLVM_TO_ISA = {
    "sse4.2": "sse4_2", "avx": "avx", "avx2": "avx2", "fma": "fma", "avx512f": "avx512f",
    "avx512bw": "avx512bw", "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16", "amx-tile": "amx_tile", "amx-bf16": "amx_bf16",
    "amx-int8": "amx_int8", "neon": "neon", "sve": "sve", "sve2": "sve2", "dotprod": "dotprod",
}


@functools.lru_cache(maxsize=64)
def llvm_features(target_json: str) -> frozenset[str]:
    """LLVM's enabled features of an llvm target (JSON of its dict form), ``mattr`` included;
    empty when LLVM does not know the CPU."""
    import json

    import tvm
    from tvm.target import codegen

    try:
        return frozenset(str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target(json.loads(target_json))))
    except Exception:  # noqa: BLE001 - an mcpu LLVM does not know: no features
        return frozenset()


def isa_of_mcpu(mcpu: str) -> tuple[str, ...]:
    """The ISA words of an LLVM ``mcpu`` (sorted): the same on every machine with that CPU."""
    import json

    feats = llvm_features(json.dumps({"kind": "llvm", "mcpu": mcpu}))
    return tuple(sorted(_LLVM_TO_ISA[f] for f in feats if f in _LLVM_TO_ISA))


def isa_of(hw: "Hardware") -> tuple[str, ...]:
    """ISA words of a CPU from its target's ``mcpu`` (LLVM features); () for a GPU."""
    if hw.kind != "cpu":
        return ()
    mcpu = str(hw.target.get("mcpu") or hw.arch or "")
    return isa_of_mcpu(mcpu) if mcpu else tuple(hw.isa)


def _cpu_model_name(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's marketing name, for descriptions only (never for ISA facts)."""
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
    """Widest SIMD register width in bits implied by the ISA words."""
    if "avx512f" in isa:
        return 512
    if "avx2" in isa or "avx" in isa:
        return 256
    return 128


def vector_registers(hardware: "Hardware") -> int:
    """Architectural vector registers of a CPU target: 32 with AVX-512, else 16 (AVX2, SSE, NEON's 32 aside)."""
    isa = tuple(getattr(hardware, "isa", ()) or ())
    if any(f.startswith("avx512") for f in isa):
        return 32
    return 32 if str(getattr(hardware, "arch", "")).startswith(("armv8", "aarch64", "neoverse", "apple")) else 16


#: vector registers a register tile leaves to its operands (the broadcast element, the loaded
#: vectors, an address): BLIS's AVX2 kernel holds 12 accumulators in 16 registers. Measured on the
#: Zen 3 corpus's training convolutions (2026-12-05, bench/results/register_tiles.json): register
#: tiles of 9-12 accumulators ran at 0.51x their task's best (geomean; 32% within 0.8x of it),
#: 13-15 at 0.26x, exactly 16 at 0.21x (7-8% within 0.8x): as slow as tiles that overflow (0.11-0.28x)
OPERAND_REGISTERS = 4


def accumulator_registers(hardware: "Hardware") -> int:
    """Vector registers a register tile's accumulators may take without spilling: all of
    :func:`vector_registers` but :data:`OPERAND_REGISTERS`."""
    return vector_registers(hardware) - OPERAND_REGISTERS


def nearness(want: Hardware, have: Hardware) -> tuple[int, float, int]:
    """How close ``have`` is to ``want`` as a source of schedules, as a sortable tuple (larger is
    nearer): same kind first (a CPU schedule means nothing to a GPU), then the same vector width
    (tile sizes follow the register width), then the share of ISA words in common (Jaccard),
    then the same core count. Used to serve a key that has no model of its own."""
    if want.kind != have.kind:
        return (-1, 0.0, 0)
    a, b = set(isa_of(want)), set(isa_of(have))
    jaccard = len(a & b) / len(a | b) if a | b else 1.0
    same_width = int(want.vector_bits == have.vector_bits)
    return (same_width, round(jaccard, 6), int(want.cores == have.cores))


def physical_cores() -> int:
    """Physical cores this process may use (what MetaSchedule tunes with by default)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    import psutil  # a TVM requirement (TuneContext refuses without it)

    phys = psutil.cpu_count(logical=False) or usable
    return max(1, min(usable, phys))


def slug(text: str) -> str:
    """A key segment from free text: lower case, [a-z0-9_.] only ("NVIDIA H200" → "h200")."""
    words = re.sub(r"[^a-z0-9.]+", " ", text.lower()).split()
    words = [w for w in words if w not in ("nvidia", "corporation")]
    return "_".join(words) or "unknown"


def cpu_key(mcpu: str, cores: int) -> str:
    """The key of a CPU: ``cpu-<slug(mcpu)>-<cores>c`` (``skylake-avx512`` → ``cpu-skylake_avx512-2c``)."""
    return f"cpu-{slug(mcpu)}-{int(cores)}c"


def cuda_key(arch: str, name: str) -> str:
    """The key of a GPU: ``cuda-<sm_XX>-<slug(name)>`` (``cuda-sm_90-h200``)."""
    return f"cuda-{arch}-{slug(name)}"


def key_of_target(target: Mapping[str, Any]) -> str | None:
    """The key of the machine a stored TVM target describes, by the same rule as detection.

    A CPU target needs ``mcpu`` and ``num-cores``; a CUDA target names no GPU model, so it has
    no key of its own (None: the caller must name it).
    """
    if target.get("kind") != "llvm" or not target.get("mcpu") or not target.get("num-cores"):
        return None
    key = cpu_key(str(target["mcpu"]), int(target["num-cores"]))
    return key if HARDWARE_KEY_RE.match(key) else None


def cpu_hardware(mcpu: str | None = None, cores: int | None = None, *, key: str | None = None) -> Hardware:
    """The Hardware of this machine's CPU (``mcpu``/``cores`` override what is detected)."""
    if mcpu is None:
        import tvm

        mcpu = str(tvm.target.codegen.llvm_get_system_cpu())
    if cores is None:
        cores = physical_cores()
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    isa = isa_of_mcpu(mcpu)
    return Hardware(
        key=key or cpu_key(mcpu, cores),
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
        key=key or cuda_key(arch, name),
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


def hardware_from_index(key: str, target: Mapping[str, Any], description: str = "") -> Hardware:
    """A :class:`Hardware` rebuilt from a stored key, target and description (index rows).

    CPU: arch = ``mcpu``, cores = ``num-cores``, ISA from LLVM (as detection does). GPU: arch
    from the target, SM count parsed from a description such as "NVIDIA H200 (132 SMs, ...)".
    """
    target = dict(target)
    if target.get("kind") != "cuda":
        arch = str(target.get("mcpu", "generic"))
        isa = isa_of_mcpu(arch)
        return Hardware(key=key, kind="cpu", arch=arch, cores=int(target.get("num-cores", 1)),
                        vector_bits=vector_bits_of(isa), target=target, description=description, isa=isa)
    m = re.search(r"(\d+)\s*SMs", description or "")
    warp = int(target.get("thread_warp_size", 32))
    return Hardware(key=key, kind="cuda", arch=str(target.get("arch", "unknown")),
                    cores=int(m.group(1)) if m else 0, vector_bits=warp * 32, target=target,
                    description=description)


def hardware_for_key(key: str, index_info: Mapping[str, Any] | None = None) -> Hardware:
    """The :class:`Hardware` a key names, for generating code for it (not necessarily this host).

    From the index's row when there is one (``Corpus.hardware_info(key)``); else this host's
    own hardware when the key is this host's; else, for a CPU key, rebuilt from the key itself
    (``cpu-<mcpu>-<cores>c`` is a reversible rule). A CUDA key names no target by itself, so
    without an index row it raises ``ValueError``, as does a key that is not a key.
    """
    if not HARDWARE_KEY_RE.match(key or ""):
        raise ValueError(f"hardware key {key!r} does not match {HARDWARE_KEY_RE.pattern}")
    if index_info:
        return hardware_from_index(key, index_info["target"], index_info.get("description") or "")
    host = cpu_hardware()
    if host.key == key:
        return host
    m = re.fullmatch(r"cpu-([a-z0-9_.]+)-(\d+)c", key)
    if m is None:
        raise ValueError(f"hardware key {key!r}: no index row says what target it is (only CPU keys "
                         "are rebuilt from the key alone)")
    mcpu, cores = m.group(1).replace("_", "-"), int(m.group(2))
    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": cores}
    return hardware_from_index(key, target, f"{mcpu} ({cores} cores)")


# ---------------------------------------------------------------------------------------------
# Written for vs run on: a program may be built for any key, but runs only where it can.

class NotRunnableHere(RuntimeError):
    """Code built for a hardware key this host cannot execute (another CPU's ISA, CUDA without
    a GPU) was asked to run; raised before anything runs, instead of an illegal instruction."""


#: LLVM features that tune code generation without adding instructions; every other feature
#: is taken to be an instruction set the host must have (an unknown name errs on refusing).
_TUNING_PREFIXES = ("fast-", "slow-", "tuning-", "no-bypass-delay", "prefer-", "allow-light-",
                    "idivq-to-divl", "idivl-to-divb", "branchfusion", "macrofusion", "sbb-dep-breaking",
                    "lea-", "pad-short-functions", "false-deps-", "use-", "vzeroupper",
                    "insert-vzeroupper", "ermsb", "fsrm")


def _instruction_features(features: frozenset[str]) -> frozenset[str]:
    return frozenset(f for f in features if not f.startswith(_TUNING_PREFIXES))


@functools.lru_cache(maxsize=1)
def host_cpu_target() -> dict[str, Any]:
    """This host's CPU as an llvm target dict (LLVM's view of the CPU it runs on)."""
    import tvm

    return {"kind": "llvm", "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}


def missing_on_host(target: Mapping[str, Any]) -> list[str]:
    """What ``target`` needs that this host lacks: instruction-set features of an llvm target
    (or a foreign ``mtriple``), or "a CUDA GPU" for a CUDA target; [] when it runs here."""
    import json

    kind = target.get("kind")
    if kind == "cuda":
        return [] if cuda_available() else ["a CUDA GPU"]
    if kind != "llvm":
        return [f"a {kind!r} device"]
    triple = str(target.get("mtriple") or "")
    if triple:
        import tvm

        host_arch = str(tvm.target.codegen.llvm_get_system_triple()).split("-")[0]
        if triple.split("-")[0] != host_arch:
            return [f"the {triple.split('-')[0]} architecture (this host is {host_arch})"]
    want = _instruction_features(llvm_features(json.dumps(dict(target), sort_keys=True)))
    have = _instruction_features(llvm_features(json.dumps(host_cpu_target(), sort_keys=True)))
    return sorted(want - have)


def check_runs_here(hardware: "Hardware | Mapping[str, Any] | Any") -> None:
    """Raise :class:`NotRunnableHere` naming both machines when this host cannot execute code
    built for ``hardware`` (a Hardware, a target dict or a ``tvm.target.Target``); return
    silently when it can. Call it before anything is built to be run or measured."""
    if isinstance(hardware, Hardware):
        name, target = hardware.key, dict(hardware.target)
    elif isinstance(hardware, Mapping):
        name, target = "target", dict(hardware)
    else:  # a tvm.target.Target
        target = {k: v for k, v in dict(hardware.export()).items() if k in ("kind", "mcpu", "mattr", "mtriple")}
        name = "target"
    missing = missing_on_host(target)
    if missing:
        host = host_cpu_target()["mcpu"] if target.get("kind") == "llvm" else "this host"
        raise NotRunnableHere(
            f"code for {name} {target} cannot run on this host ({host}): it needs "
            f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}. "
            "Encode, lower and verify it anywhere; run and measure it on a machine that has them."
        )
