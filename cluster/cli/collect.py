"""``tlm collect``: tune a model's tasks into a corpus (resumable).

    tlm collect --model resnet50 --trials 64 [--strategy evolutionary|replay-trace]
                [--tasks N] [--workloads KEY,...] [--graph exported|compiled]
                [--corpus DIR] [--hardware KEY] [--seed S] [--small]
                [--address auto|ray://HOST:10001 | --no-ray]

By default the tasks go to Ray collector actors: on the cluster at ``--address``, or on a
local Ray started for this machine (the embedded default). ``--no-ray`` runs the plain
in-process loop instead (same records, same resume rules; no Ray start-up). In Ray mode
``--hardware`` names the keys to collect for (comma-separated or ``all``); in the plain loop
it overrides this machine's key. See docs/cluster.md.

This module is the CLI glue only: the options, the one ``TuneConfig`` they describe, and the
two ways to run (``collectors.collect.collect`` in process, ``cluster.collect_job`` on Ray).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict
from typing import Any, Mapping

from cluster.cli.options import (UsageError, add_corpus_options, at_least_one, comma_list, corpus_root, index_url,
                                 user_errors)


def add_collect_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of what to collect (both ways of running)."""
    parser.add_argument("--model", required=True,
                        help="zoo model (resnet50, mobilenetv2, efficientnet_b0, bert_base, gpt2, "
                             "llama7b_layer) or a path to an .onnx file")
    parser.add_argument("--trials", type=int, default=64, help="measured candidates per task (default 64)")
    parser.add_argument("--strategy", choices=("evolutionary", "replay-trace", "tlm", "tlm-seeded", "tlm-pool"),
                        default="evolutionary",
                        help="search strategy: evolutionary (xgb cost model), replay-trace (random samples), "
                             "tlm (the model's own top-k candidates, measured: the closed loop; in process) or "
                             "tlm-seeded (the model's candidates start an evolutionary search that uses the "
                             "model's corpus-trained cost model; in process) or tlm-pool (every program of the "
                             "pool a served ranked request picks from, --trials samples plus the greedy and "
                             "rules' programs, measured: what the ranker of the model's pools learns from; "
                             "in process)")
    parser.add_argument("--tlm-model", default=None, metavar="ID|DIR",
                        help="--strategy tlm/tlm-seeded/tlm-pool: the model (default: the model of this machine's hardware key)")
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="tune only the N heaviest tasks (FLOPs x weight); default all")
    parser.add_argument("--max-mflop", type=float, default=None, metavar="M",
                        help="tune only tasks of at most M million FLOPs (e.g. leave the LM heads to the search "
                             "when collecting random samples); default all")
    parser.add_argument("--workloads", default=None, metavar="KEY[,KEY...]",
                        help="tune only the tasks of these workload keys (16 hex digits each; keys that are not "
                             "tasks of the model are passed over): a campaign measures the workloads it is "
                             "judged on first; default all")
    add_corpus_options(parser, what="corpus the records go to (created if new)")
    parser.add_argument("--hardware", default=None, metavar="KEY",
                        help="hardware key to record under (default: derived from this machine)")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                        help="measure on the CPU (default), a CUDA GPU, or CUDA when present")
    parser.add_argument("--seed", type=int, default=0, help="tuning and model seed (default 0)")
    parser.add_argument("--small", action="store_true", help="tiny zoo variant (for smoke tests)")
    parser.add_argument("--batch", type=int, default=1, help="zoo model batch size (default 1)")
    parser.add_argument("--image-size", type=int, default=None, help="CNN image side (default 224, 32 small)")
    parser.add_argument("--seq-len", type=int, default=None, help="transformer sequence length (default 32, 8 small)")
    parser.add_argument("--trials-per-iter", type=int, default=64, help="candidates measured per batch (default 64)")
    parser.add_argument("--no-check", action="store_true", help="skip the per-candidate correctness check")
    from collectors.tasks import GRAPHS

    parser.add_argument("--graph", choices=tuple(GRAPHS), default="exported",
                        help="the model's graph the tasks are cut from: exported (default: batch norms tasks of their "
                             "own, weights in the model's layout; the shipped corpus's workloads) or compiled (what "
                             "`tlm compile` builds by default: batch norms folded, weights prepacked; the workloads "
                             "a compile of the model reads from the corpus)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("collect", help="tune a model's tasks into a corpus (Ray actors; --no-ray for in-process)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_collect_arguments(parser)
    add_cluster_arguments(parser)
    parser.add_argument("--no-ray", action="store_true",
                        help="tune in this process without Ray (the plain local loop)")
    parser.set_defaults(func=run_collect)


def config_from_args(args: argparse.Namespace):
    """The TuneConfig the options describe (the one place the CLI builds one)."""
    from collectors.tuner import TuneConfig

    return TuneConfig(trials=args.trials, strategy=args.strategy, seed=args.seed,
                      trials_per_iter=args.trials_per_iter, check_correctness=not args.no_check,
                      tuner=getattr(args, "tuner_name", ""))


def zoo_kwargs_from_args(args: argparse.Namespace) -> dict:
    """``build_model`` options for a zoo model (none for an ONNX file)."""
    if str(args.model).endswith(".onnx"):
        return {}
    return {"batch": args.batch, "image_size": args.image_size, "seq_len": args.seq_len,
            "small": args.small, "seed": args.seed}


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags that say where a collection runs (for ``tlm collect``).

    In cluster mode ``--hardware`` is read as the keys to collect for (comma-separated or
    ``all``; default: every key present), see :func:`hardware_keys_from_args`.
    """
    g = parser.add_argument_group("cluster (Ray)")
    g.add_argument(
        "--address",
        default=None,
        help="collect on a Ray cluster: 'auto' (the one this node belongs to), 'ray://HOST:10001', "
        "or 'local' to start a local Ray advertising this machine's hardware",
    )
    g.add_argument("--max-attempts", type=int, default=3, help="tries per task before it is reported failed")
    g.add_argument(
        "--wait-for-nodes",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="ask the autoscaler for nodes of requested-but-absent hardware and wait this long",
    )
    g.add_argument("--object-store-mb", type=int, default=256, help="object store of a local Ray (MiB)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")


def job_config_from_args(args: argparse.Namespace):
    """The ``JobConfig`` of the flags ``add_cluster_arguments`` added."""
    from cluster.collect_job import JobConfig

    return JobConfig(
        address=None if args.address in (None, "", "local") else args.address,
        object_store_mb=args.object_store_mb,
        max_attempts=args.max_attempts,
        wait_for_nodes_s=args.wait_for_nodes,
        progress=not args.no_progress,
    )


def hardware_keys_from_args(args: argparse.Namespace) -> list[str] | None:
    """``--hardware`` as a list of keys, ``None`` meaning every key present in the cluster."""
    keys = [k.strip() for k in (args.hardware or "").split(",") if k.strip()]
    return None if not keys or "all" in keys else keys


def run_on_ray(args: argparse.Namespace, *, hardware: Mapping[str, Any] | None = None) -> int:
    """``tlm collect`` on Ray (the default): the model's tasks collected by collector actors.

    ``hardware`` gives the Hardware of a key explicitly (simulated nodes in tests). Returns 0
    when every (task, hardware) unit is done or skipped, 1 otherwise.
    """
    from cluster.collect_job import run_collection
    from collectors.hardware import detect_hardware
    from collectors.tasks import GRAPHS, UnknownWorkloads, require_workloads_found, tasks_for_models

    config = config_from_args(args)
    workloads = workloads_from_args(args)
    tasks = tasks_for_models([args.model], detect_hardware("cpu"), max_tasks=args.tasks, max_mflop=args.max_mflop,
                             workloads=workloads, graph=GRAPHS[args.graph], **zoo_kwargs_from_args(args))
    with user_errors(UnknownWorkloads):
        require_workloads_found(tasks, workloads, str(args.model))
    summary = run_collection(
        tasks,
        corpus_root=corpus_root(args),
        index_url=index_url(args),
        tune_config=config,
        hardware_keys=hardware_keys_from_args(args),
        hardware=hardware,
        config=job_config_from_args(args),
        params={"model": args.model, **asdict(GRAPHS[args.graph])},  # as the in-process loop records it
    )
    print(json.dumps(summary.as_dict(), indent=2))
    for o in summary.outcomes:
        if o.status in ("failed", "unplaceable"):
            print(f"{o.status}: {o.task_name} on {o.hardware_key}: {o.error}", file=sys.stderr)
    return 0 if summary.status == "done" else 1


def check_options(args: argparse.Namespace) -> None:
    """A bad value among the options of what to collect is a UsageError naming it (checked
    before Ray, TVM or the model are touched)."""
    from collectors.zoo import MODEL_NAMES

    model = str(args.model)
    if model.endswith(".onnx"):
        if not os.path.isfile(model):
            raise UsageError(f"--model {model!r}: no such ONNX file")
    elif model not in MODEL_NAMES:
        raise UsageError(f"unknown model {model!r}; known: {', '.join(MODEL_NAMES)} (or a path to an .onnx file)")
    for flag, value in (("--trials", args.trials), ("--tasks", args.tasks), ("--trials-per-iter", args.trials_per_iter),
                        ("--batch", args.batch), ("--image-size", args.image_size), ("--seq-len", args.seq_len)):
        at_least_one(flag, value)
    if args.max_mflop is not None and not args.max_mflop > 0:
        raise UsageError(f"--max-mflop must be > 0, got {args.max_mflop}")
    workloads_from_args(args)


def workloads_from_args(args: argparse.Namespace) -> frozenset[str] | None:
    """``--workloads`` as a set of keys (None: not given); a key that is not 16 hex digits is a UsageError."""
    if args.workloads is None:
        return None
    keys = comma_list(args.workloads)
    bad = [k for k in keys if not re.fullmatch(r"[0-9a-f]{16}", k)]
    if bad or not keys:
        raise UsageError(f"--workloads {bad[0] if bad else args.workloads!r}: a workload key is 16 hex digits "
                         "(as `tlm corpus` lists them), comma-separated")
    return frozenset(keys)


def run_collect(args: argparse.Namespace) -> int:
    if args.no_ray and args.address:
        raise UsageError("--no-ray and --address exclude each other")
    check_options(args)
    if args.strategy in ("tlm", "tlm-seeded", "tlm-pool"):
        return run_closed_loop(args)
    if not args.no_ray:
        return run_on_ray(args)
    return run_local(args)


def run_closed_loop(args: argparse.Namespace) -> int:
    """``--strategy tlm``: the model's own candidates for each task, measured and appended under
    ``tlm:<model id>``; ``--strategy tlm-seeded``: a search seeded by them (``tlm-seeded:<model
    id>``); ``--strategy tlm-pool``: every program of its ranked pool (``tlm-pool:<model id>``).
    Through the plain loop (resume and runs as for a search). In process: the model is loaded once
    here, not in every Ray collector."""
    from collectors.hardware import detect_hardware
    from storage import Corpus
    from tlm.model.network import load_model
    from tlm.service.catalog import model_for, ranker_for, resolve_model
    from tlm.service.generator import MAX_K, tuner_name
    from tlm.service.tuners import model_tuner, pool_tuner, pool_tuner_name
    from tlm.service.seeded import seeded_tuner, seeded_tuner_name

    if args.address:
        raise UsageError(f"--strategy {args.strategy} runs in this process; drop --address")
    if args.strategy == "tlm" and args.trials > MAX_K:
        raise UsageError(f"--strategy tlm generates at most {MAX_K} candidates per task, got --trials {args.trials}")
    if args.strategy == "tlm-pool" and args.trials > 4 * MAX_K:
        raise UsageError(f"--strategy tlm-pool samples at most {4 * MAX_K} programs per task, got --trials {args.trials}")
    hardware = detect_hardware(args.device, key=args.hardware)
    with Corpus.open(corpus_root(args), index_url=index_url(args)) as corpus, user_errors(ValueError):
        entry = resolve_model(args.tlm_model, corpus) if args.tlm_model else model_for(hardware.key, corpus)
    model, tokenizer, _ = load_model(entry.path)
    if args.strategy == "tlm":
        print(f"closed loop: {entry.model_id} ({entry.source}) writes {args.trials} candidate(s) per task",
              file=sys.stderr)
        args.tuner_name = tuner_name(entry.model_id)
        return run_local(args, tune=model_tuner(model, tokenizer, entry.model_id))
    ranker, ranked_by = ranker_for(entry.path, hardware.key)  # the one the server ranks this key with
    if ranker is None:
        raise UsageError(f"--strategy {args.strategy}: no cost model for {hardware.key} ({entry.path} has none and "
                         f"none is shipped for the key); make one: tlm cost-model fit --hardware {hardware.key} "
                         f"--out {entry.path}")
    if args.strategy == "tlm-pool":
        print(f"ranked pools: {entry.model_id} ({entry.source}) writes {args.trials} samples plus its greedy and "
              f"the rules' programs per task, every one measured", file=sys.stderr)
        args.tuner_name = pool_tuner_name(entry.model_id)
        return run_local(args, tune=pool_tuner(model, tokenizer, entry.model_id, ranker))
    print(f"seeded search: {entry.model_id} ({entry.source}) seeds each task's {args.trials}-trial search, "
          f"ranked by {ranked_by}", file=sys.stderr)
    args.tuner_name = seeded_tuner_name(entry.model_id)
    return run_local(args, tune=seeded_tuner(model, tokenizer, entry.model_id, ranker))


def run_local(args: argparse.Namespace, *, tune: Any = None) -> int:
    """The plain in-process collection loop (``--no-ray``; ``tune`` replaces MetaSchedule's tuner)."""
    from rich.console import Console

    from collectors.collect import collect
    from collectors.progress import summary_table
    from collectors.tasks import GRAPHS, UnknownWorkloads
    from collectors.hardware import detect_hardware
    from storage import Corpus

    hardware = detect_hardware(args.device, key=args.hardware)
    config = config_from_args(args)
    zoo_kwargs = zoo_kwargs_from_args(args)
    corpus = Corpus.open(corpus_root(args), index_url=index_url(args))
    console = Console(stderr=True)
    console.print(f"collecting {args.model} on {hardware.key} ({hardware.description}) into {corpus_root(args)}")
    try:
        with user_errors(UnknownWorkloads):
            result = collect(corpus, hardware, config, model=args.model, max_tasks=args.tasks,
                             max_mflop=args.max_mflop, workloads=workloads_from_args(args), zoo_kwargs=zoo_kwargs,
                             graph=GRAPHS[args.graph], show_progress=not args.no_progress,
                             **({"tune": tune} if tune is not None else {}))
    finally:
        corpus.close()
    Console().print(summary_table(result))
    return 0 if result.status == "done" else 1
