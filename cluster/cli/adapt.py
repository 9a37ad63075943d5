"""``tlm adapt``: make a machine without a model of its own cheap to serve well.

    tlm adapt [--measurements N] [--per-task K] [--models resnet50,efficientnet_b0] [--base ID|DIR]
              [--corpus DIR] [--out models] [--name NAME] [--epochs E] [--workers W] [--dry-run]

On this machine (its hardware key is detected, never typed):

1. **base**: the model the server would answer with today: the key's own, else the nearest
   (``tlm.service.catalog.serving_model``: same vector width, most ISA words shared, a model of
   several keys first), or ``--base``;
2. **measure what teaches the most**: the base model's own ``K`` best candidates (beams) for the
   heaviest tasks of ``--models`` (the zoo's held-out models, and every workload they share with
   the others, are left out: the judging set must stay unseen), ``ceil(N / K)`` tasks, every candidate built, run, checked and stored in the corpus as
   ``tlm:<base>`` records (the closed loop; resumable: a task measured before is skipped). Where the
   base is wrong for this CPU, its candidates are the mistakes worth correcting;
3. **fine-tune** the base on this key's records (the fastest 4 per task and sketch, each weighted by
   best/latency) with Ray Train, and register it for the key: ``tlm serve`` then answers with it;
4. **its cost model**: MetaSchedule's XGBoost model fitted on this key's records *and every other
   key's* in the corpus (each key's speeds compared within its own measurements), saved beside the
   model, so served schedules are ranked; with fewer than ``MIN_COST_MODEL_RECORDS`` records in all,
   the model is served greedy (a cost model fitted on a thousand of the key's own candidates alone
   ranked worse than the greedy program; with the other keys' it ranks better).

A progress bar covers each phase; before measuring it prints an estimate from the measured rate of
the first task. User mistakes (a held-out or unknown model, a bad number) exit 2 in one line.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from cluster.cli.options import UsageError, add_corpus_options, at_least_one, comma_list, corpus_root, index_url, user_errors

DEFAULT_MODELS = ("resnet50", "efficientnet_b0")
#: Below it (the key's measured records and every other key's together) the adapted model is served
#: greedy, without a cost model. Measured on cpu-znver4-2c: fitted on the ~1,000 beam candidates of
#: one adapt run alone, a cost model's pick was 0.35x the own model where the greedy program was
#: 1.16x (bench/results/hardware.json); fitted on the key's 2.7K records and the other keys' 17.6K,
#: its pick beat the greedy program for the adapted model (bench/results/cost_model_keys/).
MIN_COST_MODEL_RECORDS = 2000


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("adapt", help="adapt the nearest model to this machine: measure, fine-tune, register",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--measurements", type=int, default=1000, metavar="N", help="schedules to measure here (default 1000)")
    p.add_argument("--per-task", type=int, default=8, metavar="K", help="the base model's candidates per task (default 8)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"zoo models whose heaviest tasks are measured (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--base", default=None, metavar="ID|DIR", help="the model to adapt (default: the one serving this key now)")
    p.add_argument("--models-dir", default=None, metavar="DIR",
                   help="the shipped-models directory the base is chosen from (default: the repository's models/)")
    add_corpus_options(p, what="corpus the measurements go to and the model is registered in")
    p.add_argument("--out", default="models", help="where the adapted model goes (default ./models)")
    p.add_argument("--name", default=None, help="model id (default adapt-<key>-<N>); the same name resumes training")
    p.add_argument("--epochs", type=float, default=4.0, help="fine-tuning passes over the data (default 4)")
    p.add_argument("--workers", type=int, default=1, help="Ray Train workers (default 1)")
    p.add_argument("--max-mflop", type=float, default=2000.0, metavar="M",
                   help="skip tasks over M million FLOPs (their candidates take seconds each; default 2000)")
    p.add_argument("--small", action="store_true", help="the zoo's tiny variants (smoke tests)")
    p.add_argument("--dry-run", action="store_true", help="say what would be measured and trained, then stop")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run_adapt)


def run_adapt(args: argparse.Namespace) -> int:
    from collectors.zoo import HELD_OUT_MODELS, MODEL_NAMES

    for flag, value in (("--measurements", args.measurements), ("--per-task", args.per_task),
                        ("--workers", args.workers)):
        at_least_one(flag, value)
    if not args.epochs > 0 or not args.max_mflop > 0:
        raise UsageError(f"--epochs and --max-mflop must be > 0, got {args.epochs} and {args.max_mflop}")
    from tlm.service.generator import MAX_K

    if args.per_task > MAX_K:
        raise UsageError(f"--per-task is at most {MAX_K} (the generator's largest k), got {args.per_task}")
    models = comma_list(args.models)
    for m in models:
        if m not in MODEL_NAMES:
            raise UsageError(f"--models: unknown model {m!r}; known: {', '.join(MODEL_NAMES)}")
        if m in HELD_OUT_MODELS:
            raise UsageError(f"--models: {m} is held out (the judging set: {', '.join(HELD_OUT_MODELS)}); "
                             "adapt on the others")
    if not models:
        raise UsageError("--models names no model")
    from collectors.hardware import detect_hardware
    from storage import Corpus, CorpusError
    from tlm.service.catalog import SHIPPED_MODELS, NoModel, resolve_model, serving_model

    root = args.models_dir or SHIPPED_MODELS
    t0 = time.perf_counter()
    hw = detect_hardware("cpu")
    with user_errors(CorpusError), Corpus.open(corpus_root(args), index_url=index_url(args)) as corpus:
        with user_errors(NoModel):
            if args.base:
                base, why = resolve_model(args.base, corpus, root=root), "named by --base"
            else:
                sv = serving_model(hw, corpus, root=root)
                base, why = sv.entry, sv.why or f"{hw.key}'s own model"
        print(f"{hw.key} ({hw.description}); base {base.model_id}: {why}", file=sys.stderr)
        tasks = _chosen_tasks(models, hw, args)
        print(f"measure {len(tasks) * args.per_task} candidates: the base's {args.per_task} best for the "
              f"{len(tasks)} heaviest tasks of {', '.join(models)}", file=sys.stderr)
        if args.dry_run:
            return 0
        n = _measure(corpus, hw, base, tasks, args)
        name = args.name or f"adapt-{hw.key}-{args.measurements}"
        model_dir = _finetune(corpus, hw, base, name, args)
        cost_model = fit_ranker(corpus, hw.key, progress=not args.no_progress)
        if cost_model is not None:
            cost_model.save(model_dir)
    print(f"adapted {name} for {hw.key} in {(time.perf_counter() - t0) / 60:.1f} min ({n} new measurements); "
          f"serve it: tlm serve --corpus {corpus_root(args)}")
    return 0


def fit_ranker(corpus: Any, key: str, *, progress: bool = True) -> Any:
    """The adapted model's cost model: fitted on ``key``'s records and every other key's (the
    held-out models' workloads left out), or None (said on stderr) when all of them together are
    fewer than :data:`MIN_COST_MODEL_RECORDS`: then the model is served greedy."""
    from cluster.cli.cost_model import fit_cost_model
    from collectors.zoo import HELD_OUT_MODELS

    by_key = corpus.stats()["by_hardware"]
    records = sum(v.get("ok", 0) for v in by_key.values())
    if records < MIN_COST_MODEL_RECORDS:
        print(f"no cost model: {records} measured records ({by_key.get(key, {}).get('ok', 0)} of {key}), fewer than "
              f"{MIN_COST_MODEL_RECORDS} (fitted on fewer it ranked worse than the greedy program); served greedy",
              file=sys.stderr)
        return None
    cost_model, _ = fit_cost_model(corpus, key, HELD_OUT_MODELS, also_from=("all",), progress=progress)
    return cost_model


def _chosen_tasks(models: tuple[str, ...], hw: Any, args: argparse.Namespace) -> list:
    """The heaviest tasks (FLOPs x occurrences) of the models, enough for N measurements; a
    workload that also occurs in a held-out model is left out (it is in the judging set, and a
    fresh corpus would not know to keep it out of training)."""
    from collectors.tasks import tasks_for_models
    from collectors.zoo import HELD_OUT_MODELS

    held = {t.workload_key for t in tasks_for_models(HELD_OUT_MODELS, hw, small=args.small)}
    tasks = [t for t in tasks_for_models(models, hw, max_mflop=args.max_mflop, small=args.small)
             if t.workload_key not in held]
    tasks.sort(key=lambda t: (-(t.flops or 0) * t.weight, t.workload_key))
    return tasks[: math.ceil(args.measurements / args.per_task)]


def _measure(corpus: Any, hw: Any, base: Any, tasks: list, args: argparse.Namespace) -> int:
    """The base model's candidates for ``tasks``, measured into the corpus (the closed loop)."""
    from collectors.collect import collect
    from collectors.tuner import TuneConfig
    from tlm.model.network import load_model
    from tlm.service.generator import tuner_name
    from tlm.service.tuners import model_tuner

    model, tokenizer, _ = load_model(base.path)
    config = TuneConfig(trials=args.per_task, strategy="tlm", tuner=tuner_name(base.model_id))
    t0, first = time.perf_counter(), []

    def estimate(outcome: Any) -> None:
        if not first and outcome.status == "done":
            first.append(time.perf_counter() - t0)
            print(f"\nfirst task in {first[0]:.0f} s: at most {first[0] * (len(tasks) - 1) / 60:.0f} min to measure "
                  "the rest (the heaviest task came first: lighter ones are faster; measured, 960 candidates took "
                  "11 min on 2 cores), then 2-5 min of fine-tuning", file=sys.stderr)

    result = collect(corpus, hw, config, tasks=tasks, tune=model_tuner(model, tokenizer, base.model_id),
                     show_progress=not args.no_progress, on_task_done=estimate)
    if result.status != "done":
        raise UsageError(f"measuring stopped ({result.status}); run the same command again to resume")
    return result.records


def _finetune(corpus: Any, hw: Any, base: Any, name: str, args: argparse.Namespace) -> str:
    """Fine-tune ``base`` on this key's records of the corpus; the model's directory."""
    import os

    from cluster.train_job import TrainJob, run_training
    from tlm.model.dataset import DatasetConfig, build_datasets
    from tlm.model.network import model_language
    from tlm.model.train import TrainConfig

    data_dir = os.path.join(args.out, ".adapt-sets", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    s = build_datasets(corpus, data_dir, DatasetConfig(pretrain_per_sketch=0, finetune_top_k=4, hardware_keys=(hw.key,),
                                                       language=model_language(base.path)),
                       progress=not args.no_progress)
    print(f"fine-tuning {base.model_id} on {s.finetune_rows} sentences of {hw.key}", file=sys.stderr)
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    batch = max(1, min(16, s.finetune_rows // args.workers))  # a few measurements still make one batch
    cfg = TrainConfig(stage="finetune", epochs=args.epochs, batch_size=batch, lr=3e-4, loss_weighting="latency",
                      warmup_steps=5, eval_every=10_000)
    job = TrainJob(dataset_dir=s.out_dir, out_dir=args.out, name=name, workers=args.workers, hardware_key=hw.key,
                   base_path=base.path, base_model_id=base.model_id, corpus=corpus_root(args),
                   index_url=index_url(args))
    with user_errors(ValueError):
        res = run_training(cfg, job)
    print(f"{res.model_id}: {res.metrics.get('step')} steps in {res.wall_s:.0f} s", file=sys.stderr)
    return res.path
