"""``tlm models``: the trained models registered in a corpus's index, newest first.

    tlm models [--corpus DIR] [--index-url URL] [--hardware KEY] [--json]

Each row: model id, hardware key (``-`` for a pretrained model of every hardware), the model
it was fine-tuned from, held-out loss and decision-token accuracy, and its directory. The
newest usable model of a hardware key is the one the generator loads by default.
"""
from __future__ import annotations

import argparse
import json

from cluster.cli.options import add_corpus_options, open_corpus, user_errors


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list the registered TLM models", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_corpus_options(p)
    p.add_argument("--hardware", default=None, metavar="KEY", help="only models of this hardware key")
    p.add_argument("--json", action="store_true", help="print JSON rows")
    p.set_defaults(func=run_models)


def run_models(args: argparse.Namespace) -> int:
    from storage.schema import check_hardware_key

    if args.hardware:
        with user_errors(ValueError):
            check_hardware_key(args.hardware)
    with open_corpus(args) as corpus:
        rows = corpus.models(args.hardware)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    if not rows:
        print("no models registered (train one with `tlm train`)")
        return 0
    print(f"{'model':44s} {'hardware':20s} {'base':30s} {'eval loss':>9s} {'eval acc':>8s}  path")
    for r in rows:
        m = r["metrics"]
        loss = f"{m['eval_loss']:.4f}" if isinstance(m.get("eval_loss"), (int, float)) else "-"
        acc = f"{m['eval_accuracy']:.3f}" if isinstance(m.get("eval_accuracy"), (int, float)) else "-"
        print(f"{r['model_id']:44s} {r['hardware_key'] or '-':20s} {r['base_model_id'] or '-':30s} "
              f"{loss:>9s} {acc:>8s}  {r['path']}")
    return 0
