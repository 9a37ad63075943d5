"""``tlm train``: pretrain or fine-tune the tensor language model with Ray Train.

    tlm train --stage pretrain --dataset DIR [--preset tiny|small|base] [--workers 2] [--gpu]
    tlm train --stage finetune --hardware KEY --base MODEL_ID|shipped|DIR --dataset DIR
    tlm train --stage finetune --hardware KEY1,KEY2,... ...      one model for several keys

``--dataset`` is a directory written by ``tlm dataset build`` (``pretrain.parquet`` for
pretraining, ``finetune.parquet`` for fine-tuning); its ``split`` column holds out whole models.
The model is saved under ``--out/<name>/`` and registered in the corpus's index (``tlm
models``). ``--name`` names the run: starting the same name again resumes it from its newest
checkpoint. Bad input (unknown preset, no rows for a hardware, unknown base) prints one
``error:`` line and exits 2; ``-v`` shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from cluster.cli.options import add_corpus_options, comma_list, corpus_exists, corpus_root, index_url, user_errors

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    from tlm.model.train import STAGES, WEIGHTINGS, TrainConfig

    d = TrainConfig()
    p = subparsers.add_parser("train", help="pretrain or fine-tune the TLM (Ray Train)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", choices=STAGES, required=True, help="pretrain (all hardware) or finetune (one)")
    p.add_argument("--dataset", required=True, metavar="DIR", help="directory written by `tlm dataset build`")
    p.add_argument("--preset", default=d.preset, help="model shape: tiny, small (default) or base")
    p.add_argument("--hardware", default=None, metavar="KEY", help="finetune: the hardware key to learn; a comma "
                   "list trains one model for all of them (the prompt's hardware words tell them apart)")
    p.add_argument("--base", default=None, help="finetune: registered model id, 'shipped', or a model directory")
    add_corpus_options(p, what="corpus whose index registers the model")
    p.add_argument("--no-register", action="store_true", help="do not register the model in the index")
    p.add_argument("--out", default="models", help="where finished models go (default ./models)")
    p.add_argument("--name", default=None, help="run name = model id; the same name resumes a stopped run")
    p.add_argument("--workers", type=int, default=2, help="DDP workers (default 2)")
    p.add_argument("--gpu", action="store_true", help="one GPU per worker (nccl)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray)")
    p.add_argument("--epochs", type=float, default=d.epochs, help=f"passes over the data (default {d.epochs})")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="> 0: optimizer steps instead of epochs")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"sentences per worker per step (default {d.batch_size})")
    p.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {d.lr}; finetune 3e-4)")
    p.add_argument("--loss-weighting", choices=WEIGHTINGS, default=None,
                   help="finetune: weight rows by best/latency (default latency for finetune, none for pretrain)")
    p.add_argument("--weight-power", type=float, default=1.0, help="latency weighting: each fine-tuning row "
                   "counts (best/latency) ** P (default 1; higher learns from the fastest only)")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help=f"steps between checkpoints (default {d.eval_every})")
    p.add_argument("--eval-batches", type=int, default=d.eval_batches,
                   help="> 0: evaluate on at most this many batches per worker (a large test split)")
    p.add_argument("--max-failures", type=int, default=0, help="worker failures to recover from in one run")
    p.add_argument("--seed", type=int, default=0, help="initialisation and data-order seed")
    p.add_argument("--layers", type=int, default=0, metavar="N",
                   help="finetune: keep only the base's first N blocks (a smaller student; default all)")
    p.add_argument("--quality-tasks", type=int, default=0, metavar="N",
                   help="finetune: measure the greedy schedules of N held-out tasks against the corpus's best")
    p.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    from cluster.train_job import run_training
    from storage import CorpusError

    with user_errors(ValueError, CorpusError):
        cfg, job = _config(args)

    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    print(f"training run {job.name or '(new)'}: stage {cfg.stage}, {job.workers} worker(s); "
          "rerun with the same --name to resume", file=sys.stderr)
    evaluate = None
    if args.quality_tasks > 0 and job.hardware_key:
        from cluster.train_job import data_file
        from tlm.model.dataset import built_with
        from tlm.service.evaluate import greedy_quality

        held_out = built_with(data_file(args.dataset, cfg.stage)).held_out_models
        evaluate = greedy_quality(corpus_root(args), job.hardware_key, held_out, tasks=args.quality_tasks,
                                  index_url=index_url(args))
    with user_errors(ValueError, FileNotFoundError, FileExistsError):
        result = run_training(cfg, job, evaluate=evaluate)
    print(json.dumps({"model_id": result.model_id, "path": result.path, "wall_s": round(result.wall_s, 1),
                      "metrics": result.metrics}, indent=2, default=str))
    return 0


def _config(args: argparse.Namespace):
    """The TrainConfig and TrainJob the options describe; ValueError names a bad option."""
    from cluster.train_job import TrainJob, data_file
    from storage import Corpus
    from tlm.model.network import PRESETS
    from tlm.model.train import TrainConfig
    from tlm.service.catalog import resolve_model

    if args.preset not in PRESETS:
        raise ValueError(f"unknown --preset {args.preset!r}; known: {', '.join(PRESETS)}")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    finetune = args.stage == "finetune"
    if finetune and not (args.hardware and args.base):
        raise ValueError("--stage finetune needs --hardware KEY and --base MODEL_ID|shipped|DIR")
    keys = comma_list(args.hardware or "")
    if keys:
        from storage.schema import check_hardware_key

        for key in keys:
            check_hardware_key(key)
    try:
        data_file(args.dataset, args.stage)
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    cfg = TrainConfig(
        stage=args.stage, preset=args.preset, epochs=args.epochs, max_steps=args.max_steps,
        batch_size=args.batch_size, lr=args.lr if args.lr is not None else (3e-4 if finetune else TrainConfig.lr),
        loss_weighting=args.loss_weighting or ("latency" if finetune else "none"), weight_power=args.weight_power,
        eval_every=args.eval_every, eval_batches=args.eval_batches, seed=args.seed,
        warmup_steps=5 if finetune else TrainConfig.warmup_steps, layers=args.layers,
    )
    base_path = base_id = None
    register = not args.no_register
    if finetune:
        root = corpus_root(args)  # the base may be a model registered there; a new corpus has none
        corpus = Corpus.open(root, index_url=index_url(args)) if corpus_exists(root) else None
        try:
            base = resolve_model(args.base, corpus)
            base_path, base_id = base.path, base.model_id
        finally:
            if corpus is not None:
                corpus.close()
    job = TrainJob(dataset_dir=args.dataset, out_dir=args.out, name=args.name, workers=args.workers, gpu=args.gpu,
                   hardware_key=keys[0] if finetune and len(keys) == 1 else None,
                   hardware_keys=keys if finetune and len(keys) > 1 else (), base_path=base_path, base_model_id=base_id,
                   corpus=corpus_root(args) if register else None, index_url=index_url(args),
                   max_failures=args.max_failures, address=args.address)
    return cfg, job
