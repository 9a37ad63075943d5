"""``tlm compile``: a whole model compiled with the TLM's schedules, checked and timed.

    tlm compile --model mobilenetv2 [--hardware KEY] [--top-k K] [--tlm-model ID|DIR]
                [--module pkg.mod:factory] [--endpoint URL] [--out model.so]
                [--corpus DIR] [--small] [--seq-len N] [--image-size N] [--no-torch-compile] [--json]

Extracts the model's tasks; a task the corpus (``--corpus``) measured on this hardware key gets
its fastest correct record (``source: corpus``; ``--no-corpus`` asks the model for every task);
for the rest it asks the model (loaded here, or the server at ``--endpoint``) for the task's
schedule: the top-1 as written (``--top-k 1``, no measurement) or the fastest of K measured
candidates. The schedules go into a MetaSchedule database, ``compile_relax``
builds the model with them, its output is checked against PyTorch on the example inputs, and
its latency is printed beside TVM's untuned build, PyTorch eager and ``torch.compile``, with
the compile time split into extraction, generation, measurement and build.

``--module pkg.mod:factory`` compiles your own model: ``factory()`` returns ``(module,
example_args)``. ``--out`` writes the compiled library (``Executable.export_library``).
With ``--corpus``, the measured candidates of ``--top-k`` are appended (the closed loop).
``--budget N`` / ``--time-budget S`` measure where the whole model gains most
(``tlm.service.whole_model.spend_budget``): each task's ranked candidates, then the
model-seeded search from what was measured (with ``--endpoint`` too: the search runs here).
``--address`` compiles on a node of ``--hardware`` in a Ray cluster, through a collection actor
of that key (``cluster.node_job``; docs/cluster.md).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

from cluster.cli.options import (UsageError, add_corpus_options, corpus_named, corpus_root, index_url, optional_corpus,
                                 user_errors)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compile", help="compile a whole model with generated schedules",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="zoo model (resnet50, mobilenetv2, efficientnet_b0, bert_base, gpt2, llama7b_layer)")
    what.add_argument("--module", metavar="PKG.MOD:FACTORY", help="your model: FACTORY() returns (module, example_args)")
    p.add_argument("--hardware", default=None, metavar="KEY", help="hardware key (default: this machine's)")
    p.add_argument("--top-k", type=int, default=1, metavar="K",
                   help="1: the model's top-1, unmeasured (default); K > 1: the fastest of K measured candidates")
    p.add_argument("--tlm-model", default=None, metavar="ID|DIR", help="the model (default: the hardware's own, else the nearest one, as the server picks)")
    p.add_argument("--endpoint", default=None, metavar="URL", help="ask a running `tlm serve` instead of loading a model")
    p.add_argument("--no-rank", action="store_true", help="rank by likelihood alone, even when the model ships a cost "
                   "model (faster: no pool of samples per task)")
    p.add_argument("--out", default=None, metavar="FILE.so", help="write the compiled library here")
    add_corpus_options(p, what="corpus: its registered models and hardware; with --top-k > 1, where the measured "
                               "candidates are appended; used when it exists")
    p.add_argument("--small", action="store_true", help="the zoo's tiny variant")
    p.add_argument("--image-size", type=int, default=None, help="CNN image side (default 224)")
    p.add_argument("--seq-len", type=int, default=None, help="transformer sequence length (default 128)")
    p.add_argument("--no-torch-compile", action="store_true", help="skip timing torch.compile (slow to compile)")
    p.add_argument("--budget", type=int, default=0, metavar="N",
                   help="measure up to N candidates in all, one batch at a time where the whole model gains most "
                        "(the task with the most expected time left): the model's ranked candidates first, then "
                        "the model-seeded search once a task's are measured; the records land in --corpus, so the "
                        "next compile starts from them; Ctrl-C keeps what was measured")
    p.add_argument("--time-budget", type=float, default=0.0, metavar="S",
                   help="measure for up to S seconds (alone, or with --budget: whichever ends first), where the "
                        "whole model gains most; a batch starts only while time is left")
    p.add_argument("--no-corpus", action="store_true",
                   help="ask the model for every task, even those the corpus measured on this key")
    p.add_argument("--corpus-best", action="store_true",
                   help="also build with the best record per task in --corpus (MetaSchedule's search) and time it")
    p.add_argument("--keep-batch-norm", action="store_true",
                   help="keep each batch norm a task of its own, the graph as the corpus measured it (default: "
                        "folded into the convolution before it, as torch.compile does; a CNN's folded tasks are new "
                        "workloads to the corpus; --corpus-best keeps them too)")
    p.add_argument("--keep-weight-layout", action="store_true",
                   help="read every weight in the model's own layout (default: each schedule reads its weights in "
                        "the layout its tiles walk, rewritten once at compile time; the tasks are then new "
                        "workloads to a corpus collected unpacked; --corpus-best keeps the layout too)")
    p.add_argument("--exact-exp", action="store_true",
                   help="TVM's own exp, erf and pow (a libm call per vector lane) instead of the vectorized ones every "
                        "build gets (collectors/fast_math.py: within 3e-7, EfficientNet-B0 1.9x faster)")
    p.add_argument("--address", default=None, metavar="auto|ray://HOST:10001|local",
                   help="compile on a node of --hardware in this Ray cluster, through a collection actor of that "
                        "key (its measurement slot held: no collector measures beside it); the measurements land "
                        "in the shared --corpus, --out is written here ('local': a local Ray of this machine)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run_compile)


def load_factory(spec: str) -> tuple[Any, tuple]:
    """``(module, example_args)`` from ``pkg.mod:factory``; UsageError names what is wrong."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise UsageError(f"--module {spec!r} is not PKG.MOD:FACTORY")
    sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--module {spec!r}: {exc}") from None
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 2):
        raise UsageError(f"--module {spec!r}: the factory must return (module, example_args), got {type(made).__name__}")
    module, args = made
    return module, tuple(args) if isinstance(args, (tuple, list)) else (args,)


def run_compile(args: argparse.Namespace) -> int:
    from cluster.cli.compile_report import print_report

    with user_errors(ValueError):
        report = compile_on_cluster(args) if args.address else compile_with_tlm(args)
    print_report(report, stream=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    return 0 if report["correct"] else 1


def compile_on_cluster(args: argparse.Namespace) -> dict:
    """The command on a node of ``--hardware`` (``cluster.node_job``): the model built there (a
    zoo model from its config; ``--module``'s here, sent by value, so the node needs not have the
    user's module), the records in the shared corpus, ``--out`` written here. The report says
    where it ran (``node``)."""
    from rich.console import Console

    from cluster.node_job import NodeJob, run_on_node

    _check_options(args)
    console = Console(stderr=True)
    user_model = None
    if args.module is not None:
        import ray.cloudpickle

        user_model = _user_model(args)  # the factory's module goes by value: the node needs only the libraries
        ray.cloudpickle.register_pickle_by_value(sys.modules[args.module.partition(":")[0]])
    job = NodeJob(corpus_root(args), index_url(args), None if args.address == "local" else args.address, args.hardware)
    on_node = argparse.Namespace(**vars(args))
    on_node.corpus, on_node.index_url, on_node.address, on_node.hardware = job.corpus_root, job.index_url, None, None
    report, where = run_on_node(
        job, "compile", compile_on_node, on_node, user_model,
        params={"model": args.model or args.module, "budget": args.budget, "time_budget_s": args.time_budget},
        announce=lambda w: console.print(f"compiling on {w['host']} (Ray node {w['node_id'][:12]}, "
                                         f"{w['hardware_key']}), through its collection actor"))
    library = report.pop("library", None)
    if args.out and library is not None:
        with open(args.out, "wb") as f:
            f.write(library)
        report["out"] = args.out
    return report | {"node": where}


def compile_on_node(hw: Any, args: argparse.Namespace, user_model: tuple | None) -> dict:
    """:func:`compile_with_tlm` on the node a collection actor holds (``hw``: its hardware), the
    compiled library's bytes in the report (``library``) when ``--out`` asked for it."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tlm-compile-") as d:
        wanted, args.out = args.out, (os.path.join(d, "model.so") if args.out else None)
        report = compile_with_tlm(args, hardware=hw, user_model=user_model)
        if wanted:
            with open(args.out, "rb") as f:
                report["library"] = f.read()
    return report


def compile_with_tlm(args: argparse.Namespace, *, hardware: Any = None, user_model: tuple | None = None) -> dict:
    """The whole command (the report as a dict): the model's tasks, their schedules, the build,
    its check against PyTorch and the timings. UsageError (or ValueError) for the user's mistakes.
    ``hardware`` (a node's, ``compile_on_node``) instead of ``--hardware``'s or this machine's;
    ``user_model``: ``(module, example args, name)`` already built."""
    import logging

    from rich.console import Console

    from collectors.compile import check_against_torch, compile_model
    from collectors.tasks import extract_tasks, import_relax
    from tlm.service.whole_model import database_of

    logging.getLogger("httpx").setLevel(logging.WARNING)  # --endpoint: a line per request otherwise
    console = Console(stderr=True)
    _check_options(args)
    root = _corpus(args)
    if args.corpus_best and root is None:
        raise UsageError("--corpus-best needs a corpus (--corpus DIR or $TLM_CORPUS)")
    hw = hardware if hardware is not None else _hardware(args, root)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    module, example, name = user_model or _user_model(args)
    # --corpus-best builds with the corpus's records, measured on the graph as collected: kept unfolded
    fold = not (args.keep_batch_norm or args.corpus_best)
    prepack = not (args.keep_weight_layout or args.corpus_best)
    relax_mod = import_relax(module, example, fold_batch_norm=fold, prepack_weights=prepack)
    tasks = extract_tasks((module, example), hw, model_name=name, relax_mod=relax_mod)
    times["extract_s"] = time.perf_counter() - t0
    console.print(f"{name}: {len(tasks)} tasks on {hw.key}")

    chosen, model_id, unmeasured = _schedule(args, hw, tasks, console, root)
    times["generate_s"] = sum(c.generate_s for c in chosen)
    times["measure_s"] = sum(c.measure_s for c in chosen)
    t1 = time.perf_counter()
    tuned = compile_model(relax_mod, hw, database_of(chosen, hw), fast_exp=not args.exact_exp)
    times["build_s"] = time.perf_counter() - t1
    times["total_s"] = time.perf_counter() - t0
    err, correct = check_against_torch(tuned, module, example, hw)
    # what the budget bought, on the whole model: the schedules it replaced, built and timed beside it
    before = None
    if unmeasured is not None and [c.trace for c in unmeasured] != [c.trace for c in chosen]:
        before = compile_model(relax_mod, hw, database_of(unmeasured, hw), fast_exp=not args.exact_exp)
    console.print("timing: TLM build" + (", its schedules before the budget" if before else "")
                  + ", untuned build, PyTorch eager" + ("" if args.no_torch_compile else ", torch.compile"))
    lat, untuned, at_least = _latencies(args, hw, tuned, relax_mod, module, example, times, root, before)
    budget_why = None
    if before is not None:
        lat["budget_s"] = lat["tlm_s"]  # tlm_s: whichever of the two is built
        before_err, before_correct = check_against_torch(before, module, example, hw) \
            if lat["unmeasured_s"] < lat["tlm_s"] else (None, False)
        if before_correct:
            # never slower for what was measured: the budget's per-task choices were timed alone
            # (the inputs hot in the cache); the whole model is what ships
            budget_why = (f"the budget's schedules ran {lat['budget_s'] * 1e3:.3f} ms, those before it "
                          f"{lat['unmeasured_s'] * 1e3:.3f} ms: those before it are built")
            console.print(f"[yellow]{budget_why}[/yellow]")
            tuned, lat["tlm_s"], err, correct = before, lat["unmeasured_s"], before_err, before_correct
    # never ship a wrong answer, nor slower than doing nothing: TVM's untuned build instead
    shipped, why = "tlm", None
    if not correct:
        shipped, why = "untuned", (f"the build with served schedules differs from PyTorch (max abs error {err:.3g}): "
                                   "TVM's untuned build is shipped")
        console.print(f"[red]{why}[/red]")
    elif lat["untuned_s"] < lat["tlm_s"]:
        shipped, why = "untuned", (f"the build with served schedules ran {lat['tlm_s'] * 1e3:.3f} ms, TVM's untuned "
                                   f"build {lat['untuned_s'] * 1e3:.3f} ms: the untuned build is shipped")
        console.print(f"[yellow]{why}[/yellow]")
    if args.out:
        (tuned if shipped == "tlm" else untuned).export_library(args.out)
    report = {
        "model": name, "hardware": hw.key, "model_id": model_id, "endpoint": args.endpoint, "top_k": args.top_k,
        "model_fallback": getattr(args, "model_fallback", None),
        "tasks": len(tasks), "scheduled": sum(1 for c in chosen if c.trace is not None),
        "batch_norm_folded": fold, "weights_prepacked": prepack, "fast_exp": not args.exact_exp,
        "budget": args.budget, "time_budget_s": args.time_budget, "measurements": getattr(args, "measurements", 0),
        "from_corpus": sum(1 for c in chosen if c.source == "corpus"),
        "default_lowering": [{"task": c.task.task_name, "why": c.error} for c in chosen if c.trace is None],
        "correct": correct, "max_abs_err": err, "latency": lat, "latency_at_least": at_least, "compile_time": times,
        "shipped": shipped, "shipped_why": why, "out": args.out, "cores": hw.cores,
        # with a budget that changed a schedule: whether the build holds its schedules (per_task) or
        # those before it, faster on the whole model (latency: budget_s beside unmeasured_s)
        "budget_built": None if before is None else budget_why is None, "budget_why": budget_why,
        "per_task": [{"task": c.task.task_name, "source": c.source, "weight": c.task.weight, "flops": c.task.flops,
                      "workload_key": c.task.workload_key, "candidates": c.candidates, "rank": c.rank,
                      "latency_s": c.latency_s, "default_s": c.default_s, "generate_s": c.generate_s, "measure_s": c.measure_s,
                      "error": c.error} for c in chosen],
    }
    return report


def _check_options(args: argparse.Namespace) -> None:
    """The values the options name, checked before anything slow runs."""
    from collectors.zoo import MODEL_NAMES
    from tlm.service.generator import MAX_K

    if not 1 <= args.top_k <= MAX_K:
        raise UsageError(f"--top-k must be between 1 and {MAX_K}, got {args.top_k}")
    if args.budget < 0:
        raise UsageError(f"--budget must be >= 0 measurements, got {args.budget}")
    if args.time_budget < 0:
        raise UsageError(f"--time-budget must be >= 0 seconds, got {args.time_budget:g}")
    if _anytime(args) and args.top_k > 1:
        raise UsageError("--budget or --time-budget and --top-k > 1 exclude each other (the budget decides how many "
                         "of each task's candidates are measured)")
    if args.model is not None and args.model not in MODEL_NAMES:
        raise UsageError(f"unknown model {args.model!r}; known: {', '.join(MODEL_NAMES)} (or --module PKG.MOD:FACTORY)")
    if args.endpoint and args.tlm_model:
        raise UsageError("--endpoint and --tlm-model exclude each other (the server picks its model)")


def _user_model(args: argparse.Namespace) -> tuple[Any, tuple, str]:
    """``(torch module, example args, name)`` of ``--model`` (the zoo) or ``--module``."""
    from collectors.zoo import build_model

    if args.model is not None:
        module, example = build_model(args.model, small=args.small, image_size=args.image_size,
                                      seq_len=args.seq_len or (None if args.small else 128))
        return module, example, args.model
    module, example = load_factory(args.module)
    return module, example, args.module


def _schedule(args: argparse.Namespace, hw: Any, tasks: list, console: Any,
              root: str | None) -> tuple[list, str, list | None]:
    """Every task's schedule from the source the options name, with a progress bar; with
    ``--top-k`` > 1 and a corpus (``root``), the measured candidates are appended to it. Also,
    with a budget, the schedules before it (None without one)."""
    import copy

    from cluster.cli.compile_report import TaskProgress
    from tlm.service.whole_model import schedule_tasks

    corpus = None
    if root is not None:
        from collectors.layout import unpacked_keys
        from storage import Corpus

        corpus = Corpus.open(root, index_url=index_url(args))
    try:
        source, model_id, improve = _source(args, hw, corpus, tasks, console)
        on_records = corpus.append if corpus is not None and (args.top_k > 1 or _anytime(args)) else None
        if on_records is not None:
            from collectors.tasks import register_tasks

            corpus.register_hardware(hw.key, target=hw.target, description=hw.description)
            register_tasks(corpus, tasks)
        known = None
        if corpus is not None and not args.no_corpus:
            known = corpus.best_records([t.workload_key for t in tasks], hw.key)
            if known:
                console.print(f"{len(known)} of {len(tasks)} tasks measured on {hw.key} in the corpus: their "
                              "fastest records are used (--no-corpus: the model writes every one)")
            # a prepacked task the corpus holds in the layout `tlm collect` measures only
            unpacked = corpus.best_records(unpacked_keys([t for t in tasks if t.workload_key not in known]), hw.key)
            if unpacked:
                console.print(f"[yellow]{len(unpacked)} tasks are measured in the corpus with their weights in the model's "
                              "own layout only (`tlm collect`'s default graph): the model writes them here, "
                              "prepacked; --keep-weight-layout builds with those records, `tlm collect --graph "
                              "compiled` measures the tasks this compile reads[/yellow]")
        with TaskProgress(console, len(tasks)) as advance:
            chosen = schedule_tasks(tasks, hw, source, top_k=args.top_k, on_records=on_records, progress=advance,
                                    known=known)
        args.measurements = 0
        unmeasured = None
        if _anytime(args):
            unmeasured = [copy.copy(c) for c in chosen]  # spend_budget changes each in place
            from tlm.service.whole_model import spend_budget

            limits = " and ".join(([f"{args.budget} candidates"] if args.budget else [])
                                  + ([f"{args.time_budget:g} s"] if args.time_budget else []))
            console.print(f"measuring up to {limits} where the model gains most"
                          + ("" if on_records else " (no corpus: the measurements serve this compile only)"))

            def step(ts: Any, n: int) -> None:
                args.measurements = n
                console.print(f"  {n}{f'/{args.budget}' if args.budget else ''}: {ts.task.task_name} "
                              f"best {(ts.latency_s or 0) * 1e6:.1f} us")

            try:
                spend_budget(chosen, hw, source, args.budget or None, seconds=args.time_budget or None,
                             on_records=on_records, progress=step, improve=improve)
            except KeyboardInterrupt:
                console.print("interrupted: the measurements made are kept in the corpus; building with them")
    finally:
        if corpus is not None:
            corpus.close()
    return chosen, model_id, unmeasured


def _anytime(args: argparse.Namespace) -> bool:
    """Whether this compile measures where the model gains most (``--budget`` or ``--time-budget``)."""
    return bool(args.budget or args.time_budget)


def _latencies(args: argparse.Namespace, hw: Any, tuned: Any, relax_mod: Any, module: Any, example: tuple,
               times: dict[str, float], root: str | None, before: Any = None) -> tuple[dict[str, float], Any, list[str]]:
    """The TLM build's latency beside the untuned build's (and ``before``'s, the schedules a
    budget replaced: ``unmeasured_s``), PyTorch eager's, and (when asked) ``torch.compile``'s and
    the corpus best's; their build times go into ``times``. Also the untuned build (shipped
    instead when it is the faster) and the latencies that are lower bounds (a run stopped far
    slower than the TLM build's: ``collectors.compile.time_side_by_side``)."""
    from collectors.compile import compile_model, time_side_by_side, time_torch, time_torch_compile

    t2 = time.perf_counter()
    untuned = compile_model(relax_mod, hw, fast_exp=not args.exact_exp)
    times["untuned_build_s"] = time.perf_counter() - t2
    # timed in turn, medians: which build ships is decided on all of them seeing the same host
    builds = {"tlm_s": tuned, "untuned_s": untuned} | ({"unmeasured_s": before} if before is not None else {})
    timed = time_side_by_side(builds, example, hw)
    lat = dict(timed.medians)
    lat["torch_eager_s"] = time_torch(module, example, threads=hw.cores)
    if not args.no_torch_compile:
        lat["torch_compile_s"], times["torch_compile_s"] = time_torch_compile(module, example, hw.cores)
    if args.corpus_best:
        lat["corpus_best_s"], times["corpus_best_build_s"], times["corpus_best_tasks"] = \
            _time_corpus_best(root, args, hw, relax_mod, example)
    return lat, untuned, sorted(timed.at_least)


def _corpus(args: argparse.Namespace) -> str | None:
    """The corpus this compile reads (and, with ``--top-k`` > 1 or ``--budget``, appends to): a
    named one is created when new only then; the default ``./corpus`` is used when it exists."""
    if corpus_named(args) and (args.top_k > 1 or _anytime(args)):
        return corpus_root(args)
    return optional_corpus(args)


def _hardware(args: argparse.Namespace, root: str | None) -> Any:
    """The Hardware ``--hardware`` names (default: this machine's), which must run here (the model
    is run and timed): its target from the corpus index when it has the key, else rebuilt from
    the key (``collectors.hardware.hardware_for_key``)."""
    from collectors.hardware import NotRunnableHere, check_runs_here, detect_hardware, hardware_for_key

    if args.hardware is None:
        hw = detect_hardware()
    else:
        info = None
        if root is not None:
            from storage import Corpus

            with Corpus.open(root, index_url=index_url(args)) as corpus:
                info = corpus.hardware_info(args.hardware)
        hw = hardware_for_key(args.hardware, info)
    try:
        check_runs_here(hw)  # refuse another machine's code before anything runs
    except NotRunnableHere as exc:
        raise UsageError(f"--hardware {hw.key}: {exc}") from None
    return hw


def _source(args: argparse.Namespace, hw: Any, corpus: Any, tasks: list, console: Any) -> tuple[Any, str, Any]:
    """The schedule source the options ask for, the model id it names (or the endpoint), and
    the search a budget goes on with once a task's ranked pool is measured: the model-seeded
    search, with the cost model the server would rank with (asking a server: the key's shipped
    cost model, else MetaSchedule's own). A model loaded here ranks each task's
    pool sized by the task's weight in the model. Without ``--tlm-model``, the model the server
    would pick (``catalog.serving_model``): on a key with no model of its own, the nearest one,
    said (``args.model_fallback``)."""
    from tlm.service.catalog import chosen_model, key_cost_model, ranker_for
    from tlm.model.network import load_model
    from tlm.service.whole_model import endpoint_source, local_source, search_improver, weighted_pools

    if args.endpoint:
        return (endpoint_source(args.endpoint, hw.key, token=os.environ.get("TLM_SERVE_TOKEN"), rank=not args.no_rank,
                                pools=weighted_pools(tasks)),
                f"endpoint {args.endpoint}", search_improver(hw, None if args.no_rank else key_cost_model(hw.key)))
    chosen = chosen_model(hw, args.tlm_model, corpus)  # unnamed: the key's own, else the nearest (said)
    entry = chosen.entry
    if chosen.fallback:
        args.model_fallback = chosen.why
        console.print(f"[yellow]{chosen.why}[/yellow]")
    model, tokenizer, _ = load_model(entry.path)
    ranker = None if args.no_rank else ranker_for(entry.path, hw.key)[0]
    return (local_source(hw, model, tokenizer, entry.model_id, ranker, weighted_pools(tasks)), entry.model_id,
            search_improver(hw, ranker, entry.model_id))


def _time_corpus_best(root: str, args: argparse.Namespace, hw: Any, relax_mod: Any,
                      example: tuple) -> tuple[float, float, int]:
    """``(latency, build seconds, tasks with a record)`` of the model built with the corpus's
    fastest record per task (``export_ms``), the search's answer to the same question."""
    import tempfile

    from tvm.s_tir import meta_schedule as ms

    from collectors.compile import compile_model, time_model
    from collectors.ms_database import export_ms
    from storage import Corpus

    with tempfile.TemporaryDirectory() as d, Corpus.open(root, index_url=index_url(args)) as corpus:
        rep = export_ms(corpus, d, hardware_key=hw.key, best_only=True)
        t0 = time.perf_counter()
        built = compile_model(relax_mod, hw, ms.database.JSONDatabase(work_dir=d), fast_exp=not args.exact_exp)
        build_s = time.perf_counter() - t0
    return time_model(built, example, hw), build_s, rep.workloads
