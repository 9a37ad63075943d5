"""``tlm cost-model``: train the cost model of a hardware key on a corpus, and judge it.

    tlm cost-model fit --hardware KEY --out DIR [--held-out M1,M2|none] [--also-from KEY,...|all]
                       [--objective metaschedule|pairwise|mlp] [--tuners PREFIX,...] [--corpus DIR]

Trains MetaSchedule's XGBoost cost model on every record of ``KEY`` (``collectors.cost_model``),
leaving out every workload of the held-out models (the same rule as ``tlm dataset build``), and
writes ``cost_model.tar`` and ``cost_model.json`` into ``DIR``. Saved beside a model (its
directory), the generator ranks that model's candidates with it and ``tlm collect --strategy
tlm-seeded`` searches with it. ``--also-from`` adds other keys' records (each key's speeds
compared within its own measurements of a workload): what a key with a small slice borrows from
CPUs measured at length. ``--objective pairwise`` learns the order of each workload's records
with every pair weighted by their speed gap, instead of MetaSchedule's loss, which weights a
record by its speed and so hardly learns what makes a slow program slow; ``--objective mlp`` ranks
with MetaSchedule's own MLP (SegmentSumMLP, LambdaRank loss) on the same features, its weights
saved beside the tar (``cost_model_mlp.safetensors``). ``--tuners tlm-pool:`` learns from the
records of those tuners only: a model's measured ranked pools (``tlm collect --strategy tlm-pool``)
teach the ranker of that model's pools, which the searches' records do not resemble. Then, on the held-out workloads' measured records, it prints how
well it ranks them (Spearman; the speed of its top-1 and best of top-5 relative to the best).
"""
from __future__ import annotations

import argparse
from typing import Any

from cluster.cli.options import UsageError, add_corpus_options, held_out_models, open_corpus, user_errors
from collectors.zoo import HELD_OUT_MODELS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cost-model", help="train and judge a hardware key's cost model", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cost_model_command", metavar="SUBCOMMAND")
    f = sub.add_parser("fit", help="train on a corpus, save, and judge on the held-out workloads")
    add_corpus_options(f)
    f.add_argument("--hardware", required=True, metavar="KEY", help="the hardware key to learn")
    f.add_argument("--out", required=True, metavar="DIR", help="where cost_model.tar goes (e.g. a model's directory)")
    f.add_argument("--held-out", default=",".join(HELD_OUT_MODELS),
                   help="comma-separated models whose workloads are never trained on (default: the zoo's "
                        "held-out models; 'none' trains on everything)")
    f.add_argument("--also-from", default="", metavar="KEYS",
                   help="comma-separated other hardware keys whose records train it too, or 'all' "
                        "(every other key of the corpus); default: this key's records only")
    f.add_argument("--objective", default="metaschedule",
                   help="what ranks: metaschedule (default: the booster with MetaSchedule's own loss), pairwise "
                        "(the booster on ordered pairs) or mlp (MetaSchedule's SegmentSumMLP, LambdaRank loss)")
    f.add_argument("--tuners", default="", metavar="PREFIXES",
                   help="comma-separated tuner prefixes: learn only from their records (e.g. tlm-pool: for a "
                        "model's measured pools); default every record")
    f.add_argument("--max-per-workload", type=int, default=0, metavar="N",
                   help="at most N records per workload (default 0: every record)")
    f.set_defaults(func=run_fit)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_fit(args: argparse.Namespace) -> int:
    from storage.schema import check_hardware_key

    if args.max_per_workload < 0:
        raise UsageError(f"--max-per-workload must be >= 0, got {args.max_per_workload}")
    also = [k for k in args.also_from.split(",") if k.strip()]
    with user_errors(ValueError):
        for key in [args.hardware, *(k for k in also if k != "all")]:
            check_hardware_key(key)
    held = held_out_models(args.held_out)
    with open_corpus(args) as corpus:
        model, judged = fit_cost_model(corpus, args.hardware, held, max_per_workload=args.max_per_workload,
                                       also_from=tuple(also), objective=args.objective,
                                       tuners=tuple(t for t in args.tuners.split(",") if t.strip()))
    path = model.save(args.out)
    if judged and judged["workloads"]:
        print(f"held-out ({', '.join(held)}): {judged['workloads']} workloads, {judged['records']} records; "
              f"Spearman {judged['spearman_mean']:.2f}, top-1 {judged['top1_geomean']:.2f}, "
              f"top-5 {judged['top5_geomean']:.2f} of the best (a random pick: {judged['random_geomean']:.2f})")
    print(f"-> {path}")
    return 0


def fit_cost_model(corpus: Any, hardware_key: str, held: tuple[str, ...], *, max_per_workload: int = 0,
                   also_from: tuple[str, ...] = (), objective: str = "metaschedule",
                   tuners: tuple[str, ...] = (), progress: bool = True) -> tuple[Any, dict | None]:
    """The cost model of a key fitted on ``corpus`` (the held-out models' workloads left out),
    also on the records of the keys ``also_from`` (``("all",)``: every other key), and how well it
    ranks this key's held-out records (None when there are none), trained with ``objective``
    (``collectors.cost_model.OBJECTIVES``) on the records of ``tuners`` only (prefixes; empty: all); UsageError for a key the corpus
    lacks. ``tlm cost-model fit`` and ``tlm adapt`` both fit through here."""
    from collectors.cost_model import CostModel, CostModelConfig, evaluate
    from collectors.hardware import hardware_for_key
    from tlm.model.dataset import split_of

    have = sorted(corpus.stats()["by_hardware"])
    info = corpus.hardware_info(hardware_key)
    for key in (hardware_key, *(k for k in also_from if k != "all")):
        if (corpus.hardware_info(key) if key != hardware_key else info) is None:
            raise UsageError(f"the corpus has no hardware key {key!r} (it has: {', '.join(have) or 'none'})")
    also = tuple(k for k in have if k != hardware_key) if "all" in also_from else \
        tuple(dict.fromkeys(k for k in also_from if k != hardware_key))
    hardware = hardware_for_key(hardware_key, info)
    test = tuple(sorted(w["workload_key"] for w in corpus.workloads()
                        if split_of(sorted(w.get("models") or {}), held) == "test"))
    with user_errors(ValueError):
        config = CostModelConfig(hardware_key=hardware_key, exclude_workloads=test,
                                 max_records_per_workload=max_per_workload, also_from=also, objective=objective,
                                 tuners=tuners)
        model = CostModel.fit(corpus, hardware, config, progress=progress)
    s = model.summary
    print(f"cost model of {hardware_key}: {s.records} records of {s.workloads} workloads "
          f"({s.errors} failures), features {s.features_s:.0f} s, training {s.train_s:.0f} s"
          + (f"; records by key: {', '.join(f'{k} {n}' for k, n in s.by_key.items())}" if also else ""))
    judged = evaluate(model, corpus, hardware, test) if test else None
    model.held_out = {"models": list(held), "ranking": judged}
    return model, judged
