"""``tlm dataset build|stats``: the tensor language's training sets from a corpus.

``build`` writes ``pretrain.parquet`` (valid programs sampled from every task's design space)
and ``finetune.parquet`` (the fastest measured schedules per task, hardware and sketch), with a
train/test split that holds out whole models. ``stats`` prints sizes, token-length histograms
and vocabulary coverage. See ``tlm/model/dataset.py``.
"""
from __future__ import annotations

import argparse
import json

from cluster.cli.options import (UsageError, add_corpus_options, at_least_one, comma_list, held_out_models, open_corpus,
                                 user_errors)
from collectors.zoo import HELD_OUT_MODELS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dataset",
        help="build or inspect the sentence datasets the trainer reads",
        description="Build sentence datasets (Parquet) from a corpus, or print their statistics.",
    )
    sub = p.add_subparsers(dest="dataset_command", metavar="ACTION")
    b = sub.add_parser("build", help="write pretrain.parquet and finetune.parquet")
    add_corpus_options(b)
    b.add_argument("--out", required=True, help="output directory (must not hold a dataset yet)")
    b.add_argument("--per-sketch", type=int, default=8, help="sampled programs per sketch (pretraining)")
    b.add_argument("--top-k", type=int, default=4, help="fastest records per task/hardware/sketch (fine-tuning)")
    b.add_argument("--held-out", default=",".join(HELD_OUT_MODELS),
                   help="comma-separated models whose workloads form the test split (default: the zoo's held-out "
                        f"models, {', '.join(HELD_OUT_MODELS)}; 'none' for no test split)")
    b.add_argument("--hardware", default="", help="comma-separated hardware keys (default: all in the corpus)")
    b.add_argument("--seed", type=int, default=0, help="seed of the design-space sampling")
    b.add_argument("--language", type=int, default=None,
                   help="prompt grammar version (default 1, the shipped models'; 2 adds each buffer's "
                        "dimensions, vector lanes and registers, and where a sketch fuses)")
    b.add_argument("--measured-before", default=None, metavar="INSTANT",
                   help="only records measured before this ISO-8601 instant, e.g. 2026-12-05T00:16:45Z "
                        "(a set rebuilt exactly from a corpus that has grown since)")
    b.add_argument("--rules", action="store_true",
                   help="fine-tuning rows of the rule baseline's programs (its own and its second opinions) of "
                        "every training workload, after the measured rows (CPU keys)")
    b.add_argument("--rules-unmeasured-only", action="store_true",
                   help="with --rules: no rules rows for a (workload, sketch) with a measured row, so each "
                        "prompt has one answer (the teacher's where it measured)")
    b.add_argument("--measured-repeats", type=int, default=1, metavar="N",
                   help="write the measured training rows N times (default 1; with --rules the rules' rows "
                        "outnumber them)")
    b.add_argument("--workers", type=int, default=1,
                   help="processes sampling the pretraining programs (default 1; the same rows with more)")
    b.set_defaults(func=run_build)
    s = sub.add_parser("stats", help="sizes, token-length histograms, vocabulary coverage")
    s.add_argument("dir", help="dataset directory written by `tlm dataset build`")
    s.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the language's vocabulary)")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.set_defaults(func=run_stats)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_build(args: argparse.Namespace) -> int:
    import collectors.fast_import as fast_import
    from tlm.model.dataset import DatasetConfig, build_datasets

    if args.per_sketch < 0 or args.top_k < 0:
        raise UsageError(f"--per-sketch and --top-k must be >= 0, got {args.per_sketch} and {args.top_k}")
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    at_least_one("--measured-repeats", args.measured_repeats)
    if args.rules_unmeasured_only and not args.rules:
        raise UsageError("--rules-unmeasured-only needs --rules (it only drops rules rows)")
    from tlm.language import DEFAULT_LANGUAGE, LANGUAGE_VERSIONS

    language = DEFAULT_LANGUAGE if args.language is None else args.language
    if language not in LANGUAGE_VERSIONS:
        raise UsageError(f"--language {language}: unknown version; known: {', '.join(map(str, LANGUAGE_VERSIONS))}")
    held_out = held_out_models(args.held_out)
    fast_import.install()  # CPU sketches only need the x86 intrinsics; CUDA spaces add theirs
    config = DatasetConfig(pretrain_per_sketch=args.per_sketch, finetune_top_k=args.top_k,
                           held_out_models=held_out, hardware_keys=comma_list(args.hardware), seed=args.seed,
                           language=language, measured_before=args.measured_before, rules=args.rules,
                           measured_repeats=args.measured_repeats,
                           rules_unmeasured_only=args.rules_unmeasured_only)
    from tlm.model.dataset import measured_before

    try:
        measured_before(config)
    except ValueError:
        raise UsageError(f"--measured-before {args.measured_before!r}: not an ISO-8601 instant; "
                         "give e.g. 2026-12-05T00:16:45Z") from None
    with open_corpus(args) as corpus, user_errors(FileExistsError):
        summary = build_datasets(corpus, args.out, config, workers=args.workers)
    print(f"{summary.pretrain_rows} pretraining and {summary.finetune_rows} fine-tuning sentences "
          f"({summary.tasks} tasks; hardware: {', '.join(summary.hardware) or 'none'}) -> {summary.out_dir}")
    for reason, n in sorted(summary.skipped.items()):
        print(f"skipped {n}: {reason}")
    return 0


def run_stats(args: argparse.Namespace) -> int:
    from tlm.model.dataset import dataset_stats
    from tlm.model.tokenizer import build_tokenizer, load_tokenizer

    with user_errors(FileNotFoundError):
        tok = load_tokenizer(args.tokenizer) if args.tokenizer else build_tokenizer()
        stats = dataset_stats(args.dir, tok)
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"vocabulary: {stats['vocabulary_size']} words")
    for name, s in stats.items():
        if not isinstance(s, dict):
            continue
        print(f"\n{name}: {s['rows']} sentences {s['splits']}, tokens mean {s['tokens_mean']} max {s['tokens_max']}")
        print("  length histogram: " + "  ".join(f"{k}:{v}" for k, v in s["length_histogram"].items()))
        for kind, k in s["by_op_kind"].items():
            print(f"  {kind:12s} {k['rows']:6d} sentences, tokens mean {k['mean']} max {k['max']}")
        print(f"  word coverage {s['word_coverage']:.4f} (decisions {s['decision_word_coverage']:.4f}), "
              f"{s['vocabulary_used']} vocabulary words used")
        if s["unknown_words"]:
            print("  unknown words ([UNK]): " + ", ".join(f"{w}×{n}" for w, n in s["unknown_words"].items()))
    return 0
