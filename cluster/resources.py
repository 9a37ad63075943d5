"""Node roles as Ray resources.

A node says what it can measure by advertising two custom resources per hardware key
(docs/ARCHITECTURE.md, "Hardware identity"):

- ``hw:<key>``: 1 on every node of that hardware. Anything that must run *on* that hardware
  (a collector actor, a serve replica for that key) asks for a small fraction of it.
- ``measure:<key>``: one slot per device: 1 on a CPU node (the whole CPU is one device: a
  measurement uses every core), one per GPU on a GPU node. A collector holds one slot for as
  long as it tunes, so two measurements never share a device.

Ray's scheduler then does the placement and the mutual exclusion for us; the driver only
reads ``ray.cluster_resources()`` to learn which keys are present and how many slots each has.
"""
from __future__ import annotations

import json
import logging
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

from collectors.hardware import HARDWARE_KEY_RE, Hardware

log = logging.getLogger(__name__)

HW_PREFIX = "hw:"
MEASURE_PREFIX = "measure:"
#: Fraction of ``hw:<key>`` a collector actor asks for: placement only, never the limit.
HW_FRACTION = 0.01


def hw_resource(key: str) -> str:
    """Name of the placement resource of hardware ``key``."""
    return HW_PREFIX + _checked(key)


def measure_resource(key: str) -> str:
    """Name of the measurement-slot resource of hardware ``key``."""
    return MEASURE_PREFIX + _checked(key)


def _checked(key: str) -> str:
    if not isinstance(key, str) or not HARDWARE_KEY_RE.match(key):
        raise ValueError(f"hardware key {key!r} does not match {HARDWARE_KEY_RE.pattern}")
    return key


def node_resources(hardware: Hardware | list[Hardware], devices: int | Mapping[str, int] | None = None) -> dict[str, float]:
    """The custom resources a node with ``hardware`` advertises.

    ``devices`` is the number of measurement slots: an int for a single hardware, or a
    mapping key -> slots. Default: 1 for a CPU (one device), and 1 for a GPU key (pass the
    GPU count on a multi-GPU node).
    """
    hws = [hardware] if isinstance(hardware, Hardware) else list(hardware)
    out: dict[str, float] = {}
    for hw in hws:
        if isinstance(devices, Mapping):
            n = devices.get(hw.key, 1)
        elif devices is not None and len(hws) == 1:
            n = devices
        else:
            n = 1
        if hw.kind == "cpu" and n != 1:
            raise ValueError(f"a CPU is one measurement device; got {n} slots for {hw.key!r}")
        if n < 1:
            raise ValueError(f"measurement slots for {hw.key!r} must be >= 1, got {n}")
        out[hw_resource(hw.key)] = 1.0
        out[measure_resource(hw.key)] = float(n)
    return out


@dataclass(frozen=True)
class KeyCapacity:
    """What a running cluster offers for one hardware key."""

    key: str  # the hardware key
    nodes: int  # nodes advertising hw:<key> (sum of hw:<key>, 1 per node)
    slots: int  # measurement slots (sum of measure:<key>)


def keys_in_resources(resources: Mapping[str, float]) -> dict[str, KeyCapacity]:
    """Hardware keys present in a ``ray.cluster_resources()``-shaped mapping.

    A key counts only when it has at least one measurement slot: a node advertising
    ``hw:`` without ``measure:`` can host work on that hardware but cannot collect.
    """
    out: dict[str, KeyCapacity] = {}
    for name, amount in resources.items():
        if name.startswith(MEASURE_PREFIX):
            key = name[len(MEASURE_PREFIX):]
            slots = int(amount + 1e-9)
            if slots < 1:
                continue
            nodes = int(resources.get(HW_PREFIX + key, 0) + 1e-9)
            out[key] = KeyCapacity(key=key, nodes=nodes, slots=slots)
    return dict(sorted(out.items()))


def count_gpus() -> int:
    """Number of NVIDIA GPUs on this machine (0 without ``nvidia-smi`` or without GPUs)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    try:
        out = subprocess.run([exe, "--list-gpus"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed (%s); assuming no GPU", exc)
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def ray_start_command(
    resources: Mapping[str, float],
    *,
    head: bool = False,
    address: str | None = None,
    port: int = 6379,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
) -> str:
    """The exact ``ray start`` line that makes this node advertise ``resources``.

    A head node gets ``--head --port``; a worker gets ``--address`` (required). The
    resources are a JSON object inside single quotes so that a POSIX shell passes it intact.
    """
    if head == bool(address):
        raise ValueError(
            f"give exactly one of head=True or address=...; got head={head!r}, address={address!r}"
        )
    parts = ["ray", "start"]
    if head:
        parts += ["--head", f"--port={int(port)}"]
    else:
        parts.append(f"--address={address}")
    if num_cpus is not None:
        parts.append(f"--num-cpus={int(num_cpus)}")
    if num_gpus:
        parts.append(f"--num-gpus={int(num_gpus)}")
    res = json.dumps({k: (int(v) if float(v).is_integer() else v) for k, v in resources.items()})
    parts.append("--resources=" + shlex.quote(res))
    return " ".join(parts)


def detect_node_hardware(*, with_cpu: bool = False) -> list[Hardware]:
    """The hardware this node measures: its GPU key when it has GPUs, else its CPU key.

    A GPU node measures GPUs by default: its CPU is busy building for them, which would make
    CPU measurements noisy. ``with_cpu=True`` adds the CPU key anyway.
    """
    from collectors.hardware import detect_hardware

    cpu = detect_hardware("cpu")
    gpus = count_gpus()
    if not gpus:
        return [cpu]
    try:
        gpu = detect_hardware("cuda")
    except RuntimeError as exc:  # nvidia-smi sees a GPU that TVM cannot open
        log.warning("%d GPU(s) seen by nvidia-smi but TVM sees none (%s); advertising the CPU", gpus, exc)
        return [cpu]
    return [gpu, cpu] if with_cpu else [gpu]
