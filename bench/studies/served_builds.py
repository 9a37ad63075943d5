"""What the whole-model studies share (``fast_exp``, ``prepack``): a zoo model's tasks scheduled
as ``tlm compile`` schedules them, and several builds of it checked and timed side by side."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Served:
    """A zoo model and its tasks' served schedules (the options' model's ranked top-1, unmeasured)."""

    hardware: Any
    module: Any
    example: tuple
    relax_mod: Any  # batch norms folded, as tlm compile imports it
    chosen: list  # tlm.service.whole_model.TaskSchedule per task
    model_id: str


def served(name: str, *, prepack_weights: bool = False, corpus: bool = True, pad_linears: bool | None = None) -> Served:
    """``name``'s tasks scheduled as ``tlm compile --model NAME`` schedules them (its corpus asked
    first unless ``corpus`` is False), its weights prepacked or not (``pad_linears``: its linear
    layers' ragged axes padded, by default as prepacked: ``collectors.padding``)."""
    from rich.console import Console

    import cluster.cli.compile as cli
    from cluster.cli import build_parser
    from collectors.tasks import extract_tasks, import_relax

    cargs = build_parser().parse_args(["compile", "--model", name, "--no-torch-compile"]
                                      + ([] if corpus else ["--no-corpus"]))
    root = cli._corpus(cargs) if corpus else None
    hw = cli._hardware(cargs, root)
    module, example, _ = cli._user_model(cargs)
    relax_mod = import_relax(module, example, fold_batch_norm=True, prepack_weights=prepack_weights,
                             pad_linears=pad_linears)
    tasks = extract_tasks((module, example), hw, model_name=name, relax_mod=relax_mod)
    chosen, model_id, _ = cli._schedule(cargs, hw, tasks, Console(stderr=True), root)
    return Served(hw, module, example, relax_mod, chosen, model_id)


def timed(builds: dict[str, Any], model: Served) -> dict:
    """Each build checked against PyTorch and all timed in turn in this process
    (``collectors.compile.time_side_by_side``), PyTorch eager beside them: ``latency_s``,
    ``max_abs_err`` and ``correct`` by build name; ``latency_at_least``: the builds whose figure is a
    lower bound (a run stopped once far slower than the first build's)."""
    from collectors.compile import check_against_torch, time_side_by_side, time_torch

    checks = {n: check_against_torch(b, model.module, model.example, model.hardware) for n, b in builds.items()}
    side = time_side_by_side(builds, model.example, model.hardware)
    lat = dict(side.medians)
    lat["torch_eager"] = time_torch(model.module, model.example, threads=model.hardware.cores)
    return {"latency_s": lat, "latency_at_least": sorted(side.at_least), "max_abs_err": {n: c[0] for n, c in checks.items()},
            "correct": {n: c[1] for n, c in checks.items()}}
