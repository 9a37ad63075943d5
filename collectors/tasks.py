"""From a model to tuning tasks: torch.export → Relax → fused PrimFuncs → ``Task`` list.

A model is a zoo name (collectors/zoo.py), a ``(torch.nn.Module, example_args)`` pair, or the
path of an ONNX file (needs the optional ``onnx`` package). It is imported into Relax with
``from_exported_program``, fused by the ``zero`` pipeline (without fusion there are no tasks),
and MetaSchedule's ``extract_tasks`` yields one task per distinct subgraph with its weight
(occurrences). A task's identity is ``collectors.tir.workload_key`` of its PrimFunc, so the same
subgraph from two models is one workload; :func:`register_tasks` puts workloads into the
corpus index once, and :func:`task_from_index` rebuilds a Task from what the index stored.
"""
from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Collection, Iterable, Mapping, Sequence

from collectors.hardware import Hardware
from collectors.op_kinds import op_kind_of
from collectors.tir import load_module, workload_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Graph:
    """How a model's graph is imported before its tasks are cut (:func:`import_relax`'s options).

    The same model under two graphs gives other workloads: a folded convolution computes its
    batch norm's shift, a weight marked layout-free is in the key. A corpus serves a compile only
    the workloads it measured on the graph that compile builds, so collection and compile name it."""

    fold_batch_norm: bool = False
    prepack_weights: bool = False


#: as ``torch.export`` gives it (batch norms on their own, weights in the model's layout): the shipped corpus's
EXPORTED = Graph()
#: the graph ``tlm compile`` builds by default: batch norms folded, weights prepacked
COMPILED = Graph(fold_batch_norm=True, prepack_weights=True)
GRAPHS = {"exported": EXPORTED, "compiled": COMPILED}  # by the name ``tlm collect --graph`` takes


@dataclass
class Task:
    """One tuning task, as extracted from a model (or handed in by a user).

    ``mod`` is the IRModule MetaSchedule tunes (a single ``main`` PrimFunc); its workload key
    is ``collectors.tir.workload_key(mod)``, a structural hash, so the same subgraph from two models
    is one task.
    """

    workload_key: str  # structural hash of ``mod`` as 16 hex digits
    task_name: str  # MetaSchedule's task name, e.g. "fused_matmul_add"
    mod: Any  # tvm.IRModule with one PrimFunc named "main"
    weight: int = 1  # how often the subgraph occurs in the model
    flops: float = 0.0  # floating-point operations of one run
    op_kind: str = ""  # coarse kind: "matmul", "conv2d", "elementwise", "reduction", ...
    model: str = ""  # model it came from ("" for a user task); held-out splits use it

    @property
    def tvmscript(self) -> str:
        """The PrimFunc as TVMScript text, as stored once in the index's workloads table."""
        return self.mod.script()


def estimate_flops(mod: Any) -> float:
    """Floating-point operations of one run of ``mod`` (TVM's TIR estimator; 0 if it cannot)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(mod))
    except Exception as exc:  # noqa: BLE001 - the estimator rejects some loop forms
        logger.debug("flop estimate failed: %s", exc)
        return 0.0


def import_relax(model: Any, args: Sequence[Any] | None = None, *, fold_batch_norm: bool = False,
                 prepack_weights: bool = False, pad_linears: bool | None = None) -> Any:
    """A fused Relax IRModule (weights as constants) from a torch module + args or an ONNX path.

    ``fold_batch_norm`` (what a deployer's compile wants; collection keeps the graph as the
    corpus measured it): each inference batch norm after a convolution is folded into it, its
    scale into the weights and its shift a bias add the convolution's task fuses, as
    ``torch.compile`` does: on the PyTorch side for a torch module (``collectors.fold``), then
    TVM's ``FoldBatchnormToConv2D`` + ``FoldConstant`` for an ONNX model or a batch norm
    PyTorch's side could not fold (MobileNetV2's ``FoldConstant``: 13 s with its batch norms,
    1.5 s without). Full-size MobileNetV2: 76 tasks -> 52, its 37 batch-norm tasks gone; each had one program in
    MetaSchedule's design space (the four loops fused and split by 64 lanes across 112-wide
    rows, every load and store scalar) and they were half of the served kernels' time.

    ``prepack_weights`` (``tlm compile``'s default): every constant a fused function reads (the
    weights) is marked layout-free (TVM's ``AttachAttrLayoutFreeBuffers``), so a schedule may read
    it in the layout its tiles walk, rewritten once at compile time
    (``collectors.compile.prepacked``): BERT-base at sequence 128 from served schedules 85.8 ms
    against 107.6 in its own layout and 90.4 for PyTorch eager (Rocket Lake,
    ``bench/results/prepack-rocketlake-2c.md``); its 768 x 3072 dense as fast as MKL's. A task that
    reads a weight is then another workload than the unpacked one (the attribute is in the key).
    ``pad_linears`` (default: as ``prepack_weights``): a torch module's linear layers computed on
    ragged axes padded (``collectors.padding``: GPT-2's 50,257-wide LM head at 50,304 columns)."""
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
        import tvm.relax.frontend.torch  # noqa: F401 - explicit import needed (FACTS)
        from tvm.relax.frontend.torch import from_exported_program

        from collectors.fold import export, fold_conv_batch_norm
        from collectors.padding import pad_ragged_linears

        if args is None:
            raise ValueError("a torch module needs example args")
        if prepack_weights if pad_linears is None else pad_linears:
            model = pad_ragged_linears(model)
        if fold_batch_norm:
            _, exported, _ = fold_conv_batch_norm(model, args)
        else:
            exported = export(model, args)
        try:
            mod = from_exported_program(exported)
        except AssertionError as exc:  # its importer asserts where it has no converter for an op
            if "Unsupported function types" not in str(exc):
                raise
            raise UnsupportedModel(f"TVM's PyTorch importer cannot convert this model: {exc}") from exc
    if fold_batch_norm:  # what PyTorch's side left; FoldConstant also folds BERT's masks (126 -> 118 ms)
        mod = relax.transform.FoldConstant()(relax.transform.FoldBatchnormToConv2D()(mod))
    mod = relax.get_pipeline("zero")(mod)
    if prepack_weights:
        mod = _without_empty_layout_freedom(relax.transform.AttachAttrLayoutFreeBuffers()(mod))
    assert isinstance(mod, tvm.IRModule)
    return mod


class UnsupportedModel(ValueError):
    """A model TVM cannot import (an op its PyTorch frontend has no converter for): the message
    names the op; the command line says it in one line."""


def _without_empty_layout_freedom(mod: Any) -> Any:
    """``mod`` with the empty ``layout_free_buffers`` TVM attaches to a function that reads no
    weight removed: such a task (a softmax, a layer norm) stays the workload the corpus measured."""
    import tvm

    from collectors.layout import LAYOUT_FREE_ATTR, layout_free_params

    for gv, f in list(mod.functions.items()):
        if isinstance(f, tvm.tirx.PrimFunc) and layout_free_params(f) == []:
            mod.update_func(gv, f.without_attr(LAYOUT_FREE_ATTR))
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
                  relax_mod: Any | None = None, graph: Graph = EXPORTED, **zoo_kwargs: Any) -> list[Task]:
    """Tuning tasks of ``model`` for ``hardware``, heaviest (FLOPs × weight) first.

    ``zoo_kwargs`` (batch, image_size, seq_len, small, seed) go to ``build_model`` for a zoo
    name. ``graph``: how the model is imported (:data:`EXPORTED`, :data:`COMPILED`).
    ``relax_mod`` skips the import when the caller already has the fused module.
    """
    from tvm.s_tir import meta_schedule as ms

    from collectors.fast_import import install_for_target

    target = hardware.tvm_target()
    install_for_target(target)
    if relax_mod is None:
        name, relax_mod = _zoo_relax(model, zoo_kwargs, graph)
    else:
        name = resolve_model(model, **zoo_kwargs)[0]
    name = model_name or name
    extracted = ms.relax_integration.extract_tasks(relax_mod, target)
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
    tasks.sort(key=heaviest_first)
    logger.info("%s: %d tasks for %s", name, len(tasks), hardware.key)
    return tasks


#: fused Relax modules of the zoo's small variants by (name, build options), oldest first: an
#: import (torch.export, from_exported_program, the zero pipeline) takes 3-10 s, and one process
#: often asks again (``tlm adapt`` lists its models' tasks and the judging set's in each step; a
#: test worker extracts the same small models in many tests: ~6 s of each extraction). IRModules
#: are immutable and Tasks are made anew per call, so nothing a caller changes leaks into the next.
#: Full-size models are not kept: their weights are constants (BERT-base 0.4 GB), asked for once.
_ZOO_RELAX: OrderedDict[tuple, Any] = OrderedDict()
_ZOO_RELAX_KEEP = 8


def _zoo_relax(model: Any, zoo_kwargs: dict, graph: Graph) -> tuple[str, Any]:
    """``(name, fused Relax module)`` of any accepted model form, a zoo model's small variant
    from :data:`_ZOO_RELAX` when this process imported it before."""
    from collectors.zoo import MODEL_NAMES

    key = None
    if isinstance(model, str) and model in MODEL_NAMES and zoo_kwargs.get("small"):
        key = (model, tuple(sorted(zoo_kwargs.items())), graph)
        if key in _ZOO_RELAX:
            _ZOO_RELAX.move_to_end(key)
            return model, _ZOO_RELAX[key]
    name, module, args = resolve_model(model, **zoo_kwargs)
    mod = import_relax(module, args, **asdict(graph))
    if key is not None:
        _ZOO_RELAX[key] = mod
        while len(_ZOO_RELAX) > _ZOO_RELAX_KEEP:
            _ZOO_RELAX.popitem(last=False)
    return name, mod


def register_tasks(corpus: Any, tasks: Sequence[Task]) -> None:
    """Put each task's workload into the corpus index once and link it to its model.

    The first module registered under a workload key stays the key's module: the key is a
    structural hash that ignores block and buffer names, but traces address blocks by name,
    so every record of a key must be tuned on that one module. A task whose key is already
    stored gets the stored module (``task.mod`` is replaced; same program, stored names).
    """
    import tvm

    for t in tasks:
        row = corpus.workload(t.workload_key)
        if row and (row.get("mod_json") or row.get("tvmscript")):
            t.mod = load_module(row)
        else:
            corpus.register_workload(t.workload_key, task_name=t.task_name, tvmscript=t.tvmscript,
                                     flops=t.flops, op_kind=t.op_kind, mod_json=tvm.ir.save_json(t.mod))
        if t.model:
            corpus.register_workload_model(t.workload_key, model=t.model, weight=t.weight)


def heaviest_first(task: Task) -> tuple[float, str]:
    """Sort key of "heaviest first": FLOPs x occurrences, descending, then by name."""
    return (-(task.flops or 0) * task.weight, task.task_name)


class UnknownWorkloads(ValueError):
    """Workload keys asked for that are none of the tasks at hand (a mistyped key, another model's)."""


def require_workloads_found(selected: Sequence[Task], workloads: Collection[str] | None, source: str) -> None:
    """:class:`UnknownWorkloads` when ``workloads`` was asked for and the selection (``selected``,
    :func:`select_tasks`'s) holds none of it: one message for the in-process and the Ray collection."""
    if workloads is not None and not selected:
        raise UnknownWorkloads(f"none of the workloads {', '.join(sorted(workloads))} is a task of {source}")


def select_tasks(tasks: Sequence[Task], *, max_tasks: int | None = None,
                 max_mflop: float | None = None, workloads: Collection[str] | None = None) -> list[Task]:
    """The heaviest ``max_tasks`` of ``tasks`` (given heaviest first, as ``extract_tasks`` sorts
    them) among those of at most ``max_mflop`` million FLOPs (and, given ``workloads``, among
    those whose workload key it holds: a campaign collects the workloads it is judged on first).

    Why a FLOP cap: random samples of a 33-GFLOP LM head run for seconds each (many hit the
    run timeout), an hour per task; a collection of diverse samples skips those and leaves
    them to the search. Raises ValueError for a bound below 1 / not above 0.
    """
    if max_tasks is not None and max_tasks < 1:
        raise ValueError(f"max_tasks must be >= 1, got {max_tasks}")
    if max_mflop is not None and not max_mflop > 0:
        raise ValueError(f"max_mflop must be > 0, got {max_mflop}")
    kept = [t for t in tasks if (max_mflop is None or t.flops <= max_mflop * 1e6)
            and (workloads is None or t.workload_key in workloads)]
    return kept[:max_tasks] if max_tasks else kept


def tasks_for_models(models: Iterable[Any], hardware: Hardware, *, max_tasks: int | None = None,
                     max_mflop: float | None = None, workloads: Collection[str] | None = None,
                     graph: Graph = EXPORTED, **zoo_kwargs: Any) -> list[Task]:
    """Tasks of the given models, one per workload key (the weights of repeats are summed).

    Extracted once for ``hardware`` (the driver's CPU): the subgraphs come from the
    target-independent ``zero`` pipeline, so the same tasks serve every key. ``max_tasks``,
    ``max_mflop`` and ``workloads`` select each model's tasks (:func:`select_tasks`).
    """
    by_key: dict[str, Task] = {}
    for model in models:
        found = extract_tasks(model, hardware, graph=graph, **zoo_kwargs)
        for t in select_tasks(found, max_tasks=max_tasks, max_mflop=max_mflop, workloads=workloads):
            if t.workload_key in by_key:
                by_key[t.workload_key].weight += t.weight
            else:
                by_key[t.workload_key] = t
    return list(by_key.values())


def task_from_index(row: Mapping[str, Any]) -> Task:
    """The Task of an index ``workloads`` row (``Corpus.workload(key)`` / ``workloads()``).

    The module is the stored one (names included: traces address blocks by name); the model
    is the first the workload occurs in, if any. Raises ``ValueError`` when the row holds no
    usable module.
    """
    models = row.get("models") or {}
    return Task(workload_key=row["workload_key"], task_name=row.get("task_name") or "main",
                mod=load_module(row), op_kind=row.get("op_kind") or "",
                flops=float(row.get("flops") or 0.0), model=next(iter(sorted(models)), ""))
