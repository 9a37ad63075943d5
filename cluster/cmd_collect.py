"""``tlm collect``: tune a model's tasks into a corpus (resumable).

    tlm collect --model resnet50 --trials 64 [--strategy evolutionary|replay-trace]
                [--tasks N] [--corpus DIR] [--hardware KEY] [--seed S] [--small]
                [--address auto|ray://HOST:10001 | --no-ray]

By default the tasks go to Ray collector actors: on the cluster at ``--address``, or on a
local Ray started for this machine (the embedded default). ``--no-ray`` runs the plain
in-process loop instead (same records, same resume rules; no Ray start-up). In Ray mode
``--hardware`` names the keys to collect for (comma-separated or ``all``); in the plain loop
it overrides this machine's key. See docs/cluster.md.

The argument definitions live in :func:`add_collect_arguments` so that a distributed variant
can extend the same parser (e.g. with ``--address``).
"""
from __future__ import annotations

import argparse


def add_collect_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a local collection (shared with any distributed variant)."""
    parser.add_argument("--model", required=True,
                        help="zoo model (resnet50, mobilenetv2, efficientnet_b0, bert_base, gpt2, "
                             "llama7b_layer) or a path to an .onnx file")
    parser.add_argument("--trials", type=int, default=64, help="measured candidates per task (default 64)")
    parser.add_argument("--strategy", choices=("evolutionary", "replay-trace"), default="evolutionary",
                        help="search strategy: evolutionary (xgb cost model) or replay-trace (random samples)")
    parser.add_argument("--tasks", type=int, default=None, metavar="N",
                        help="tune only the N heaviest tasks (FLOPs x weight); default all")
    parser.add_argument("--corpus", default="corpus", metavar="DIR", help="corpus root directory (default ./corpus)")
    parser.add_argument("--index-url", default=None, help="SQL index URL (default: sqlite file in the corpus)")
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


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("collect", help="tune a model's tasks into a corpus (Ray actors; --no-ray for in-process)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_collect_arguments(parser)
    from cluster.collect_job import add_cluster_arguments

    add_cluster_arguments(parser)
    parser.add_argument("--no-ray", action="store_true",
                        help="tune in this process without Ray (the plain local loop)")
    parser.set_defaults(func=run_collect)


def config_from_args(args: argparse.Namespace):
    """The TuneConfig the options describe."""
    from collectors.tuner import TuneConfig

    return TuneConfig(trials=args.trials, strategy=args.strategy, seed=args.seed,
                      trials_per_iter=args.trials_per_iter, check_correctness=not args.no_check)


def run_collect(args: argparse.Namespace) -> int:
    if args.no_ray and args.address:
        raise SystemExit("error: --no-ray and --address exclude each other")
    if not args.no_ray:
        from cluster.collect_job import collect_from_args

        return collect_from_args(args)
    return run_local(args)


def run_local(args: argparse.Namespace) -> int:
    """The plain in-process collection loop (``--no-ray``)."""
    import logging

    from rich.console import Console

    from collectors.collect import collect, summary_table
    from collectors.hardware import detect_hardware
    from storage import Corpus

    # MetaSchedule logs its per-iteration tables at INFO; the progress bar says enough.
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    hardware = detect_hardware(args.device, key=args.hardware)
    config = config_from_args(args)
    zoo_kwargs = {"batch": args.batch, "image_size": args.image_size, "seq_len": args.seq_len,
                  "small": args.small, "seed": args.seed}
    if args.model.endswith(".onnx"):
        zoo_kwargs = {}
    corpus = Corpus.open(args.corpus, index_url=args.index_url)
    console = Console(stderr=True)
    console.print(f"collecting {args.model} on {hardware.key} ({hardware.description}) into {args.corpus}")
    try:
        result = collect(corpus, hardware, config, model=args.model, max_tasks=args.tasks, zoo_kwargs=zoo_kwargs)
    finally:
        corpus.close()
    Console().print(summary_table(result))
    return 0 if result.status == "done" else 1
