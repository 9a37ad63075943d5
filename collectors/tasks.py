"""From a model to tuning tasks: torch.export → Relax → fused PrimFuncs → ``Task`` list.

A model is a zoo name (collectors/zoo.py), a ``(torch.nn.Module, example_args)`` pair, or the
path of an ONNX file (needs the optional ``onnx`` package). It is imported into Relax with
``from_exported_program``, fused by the ``zero`` pipeline (without fusion there are no tasks),
and MetaSchedule's ``extract_tasks`` yields one task per distinct subgraph with its weight
(occurrences). A task's identity is ``storage.workload_key`` of its PrimFunc, so the same
subgraph from two models is one workload; :func:`register_tasks` puts workloads into the
corpus index once.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Sequence

from collectors.hardware import Hardware
from collectors.task import Task

logger = logging.getLogger(__name__)

#: Coarse op kinds, tested in order against the task name (first match wins).
_OP_KINDS = (
    ("conv2d", r"conv2d"),
    ("conv1d", r"conv1d"),
    ("matmul", r"matmul|dense|linear|batch_matmul"),
    ("softmax", r"softmax"),
    ("norm", r"layer_norm|rms_norm|group_norm|batch_norm"),
    ("pool", r"pool"),
    ("reduction", r"\bsum\b|mean|max\b|min\b|variance|reduce|_sum|_mean"),
    ("gather", r"take|gather|embedding|index"),
    ("layout", r"transpose|reshape|concat|split|strided_slice|broadcast_to|squeeze|expand_dims|permute"),
)


def op_kind_of(task_name: str) -> str:
    """A coarse op kind from a MetaSchedule task name ("fused_conv2d_add_relu" → "conv2d")."""
    name = task_name.lower()
    for kind, pattern in _OP_KINDS:
        if re.search(pattern, name):
            return kind
    return "elementwise"


def estimate_flops(mod: Any) -> float:
    """Floating-point operations of one run of ``mod`` (TVM's TIR estimator; 0 if it cannot)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception as exc:  # noqa: BLE001 - the estimator rejects some loop forms
        logger.debug("flop estimate failed: %s", exc)
        return 0.0


def import_relax(model: Any, args: Sequence[Any] | None = None) -> Any:
    """A fused Relax IRModule (weights as constants) from a torch module + args or an ONNX path."""
    import tvm
    from tvm import relax

    if isinstance(model, str):
        if not model.endswith(".onnx"):
            raise ValueError(f"expected a zoo model name or a path to an .onnx file, got {model!r}")
        try:
            import onnx
        except ImportError as exc:
            raise ImportError(f"importing {model!r} needs the optional 'onnx' package") from exc
        from tvm.relax.frontend.onnx import from_onnx

        mod = from_onnx(onnx.load(model))
    else:
        import torch
        import tvm.relax.frontend.torch  # noqa: F401 - explicit import needed (FACTS)
        from tvm.relax.frontend.torch import from_exported_program

        if args is None:
            raise ValueError("a torch module needs example args")
        with torch.no_grad():
            exported = torch.export.export(model.eval(), tuple(args))
        mod = from_exported_program(exported)
    mod = relax.get_pipeline("zero")(mod)
    assert isinstance(mod, tvm.IRModule)
    return mod


def resolve_model(model: Any, **zoo_kwargs: Any) -> tuple[str, Any, tuple | None]:
    """(model name, torch module or ONNX path, example args) for any accepted model form."""
    from collectors.zoo import MODEL_NAMES, build_model

    if isinstance(model, str) and model in MODEL_NAMES:
        module, args = build_model(model, **zoo_kwargs)
        return model, module, args
    if isinstance(model, str):
        return model.rsplit("/", 1)[-1].removesuffix(".onnx"), model, None
    if isinstance(model, tuple) and len(model) == 2:
        module, args = model
        return type(module).__name__.lower(), module, tuple(args)
    raise TypeError(f"model must be a zoo name, (torch module, args) or an .onnx path, got {type(model).__name__}")


def extract_tasks(model: Any, hardware: Hardware, *, model_name: str | None = None,
                  relax_mod: Any | None = None, **zoo_kwargs: Any) -> list[Task]:
    """Tuning tasks of ``model`` for ``hardware``, heaviest (FLOPs × weight) first.

    ``zoo_kwargs`` (batch, image_size, seq_len, small, seed) go to ``build_model`` for a zoo
    name. ``relax_mod`` skips the import when the caller already has the fused module.
    """
    from storage import workload_key
    from tvm.s_tir import meta_schedule as ms

    from collectors.fast_import import install_for_target

    target = hardware.tvm_target()
    install_for_target(target)
    name, module, args = resolve_model(model, **zoo_kwargs)
    name = model_name or name
    mod = relax_mod if relax_mod is not None else import_relax(module, args)
    extracted = ms.relax_integration.extract_tasks(mod, target)
    tasks = []
    for t in extracted:
        prim = t.dispatched[0]
        tasks.append(Task(
            workload_key=workload_key(prim),
            task_name=str(t.task_name),
            mod=prim,
            weight=int(t.weight),
            flops=estimate_flops(prim),
            op_kind=op_kind_of(str(t.task_name)),
            model=name,
        ))
    tasks.sort(key=lambda t: (-t.flops * t.weight, t.task_name))
    logger.info("%s: %d tasks for %s", name, len(tasks), hardware.key)
    return tasks


def register_tasks(corpus: Any, tasks: Sequence[Task]) -> None:
    """Put each task's workload into the corpus index once and link it to its model.

    The first module registered under a workload key stays the key's module: the key is a
    structural hash that ignores block and buffer names, but traces address blocks by name,
    so every record of a key must be tuned on that one module. A task whose key is already
    stored gets the stored module (``task.mod`` is replaced; same program, stored names).
    """
    import tvm

    from storage.interop import workload_module

    for t in tasks:
        stored = workload_module(corpus, t.workload_key)
        if stored is not None:
            t.mod = stored
        else:
            corpus.register_workload(t.workload_key, task_name=t.task_name, tvmscript=t.tvmscript,
                                     flops=t.flops, op_kind=t.op_kind, mod_json=tvm.ir.save_json(t.mod))
        if t.model:
            corpus.register_workload_model(t.workload_key, model=t.model, weight=t.weight)


def compile_and_run(mod: Any, args: Sequence[Any], hardware: Hardware | None = None,
                    database: Any | None = None) -> Any:
    """Compile a Relax module for ``hardware`` (default: plain host llvm) and run it on ``args``.

    With a MetaSchedule ``database`` the tuned schedules are applied (``compile_relax``).
    Returns the output as a numpy array.
    """
    import numpy as np
    import tvm
    from tvm import relax

    target = hardware.tvm_target() if hardware is not None else tvm.target.Target({"kind": "llvm"})
    if database is not None:
        from tvm.s_tir import meta_schedule as ms

        ex = ms.relax_integration.compile_relax(database, mod, target, params=None)
    else:
        ex = tvm.compile(mod, target=target)
    dev = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    vm = relax.VirtualMachine(ex, dev)
    inputs = [tvm.runtime.tensor(np.asarray(a.detach().cpu().numpy() if hasattr(a, "detach") else a), device=dev)
              for a in args]
    out = vm["main"](*inputs)
    while not hasattr(out, "numpy") and len(out) == 1:  # unwrap a 1-tuple
        out = out[0]
    return out.numpy()
