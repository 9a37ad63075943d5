"""The rules' second opinions (issue 32, best-of-k): which of the knobs the rules fix should a
measured budget try right after the rules' own program?

    .venv/bin/python -m bench.studies.rule_portfolio [--quality 20] [--train 16] [--candidates A,B] [--out FILE]

Per task, in one measurement call (``bench.studies.rule_variants.judge_variants``: checked, 3 x 3
runs, median, beside the key's fastest corpus record and MetaSchedule@256 where cached): the
rules' program and each variant of ``CANDIDATES`` (the blocked plans forced, MetaSchedule's other
auto-unroll steps, the Roller-style tiles). On the quality benchmark's ``--quality`` heaviest
judging tasks (against MS@256) and the key's fixed training sample (``--train``, against the
corpus's best: a set the choice was not made on), the geometric-mean speed of the fastest of the
rules and every subset of the variants, so the portfolio is chosen by what it adds, not by
each variant alone. ``collectors.rules.VARIANTS`` is what this chose. JSON to
``bench/results/rule_portfolio-<key>.json``.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import time

from bench._common import RESULTS, geomean, machine, refuse_beside_measuring

#: name -> collectors.rules.rule_schedule options
CANDIDATES: dict[str, dict] = {"sweep": {"blocking": "sweep"}, "panel": {"blocking": "panel"},
                               "unroll512": {"unroll": 512}, "unroll16": {"unroll": 16},
                               "roller": {"blocked": False},
                               # the inner reduction's cap (blocking.INNER_REDUCTION 8; 16 in the AVX-512 tall
                               # sweep): ViT's 3072-deep dense ran 1.17-1.23x at kc 6 (levers 6e)
                               "kc6": {"inner_reduction": 6}, "kc4": {"inner_reduction": 4},
                               # deeper: MetaSchedule@1000's best program of BERT's 768 -> 3072 dense
                               # is the rules' 8 x 32 register tile at kc 48 (Rocket Lake, 2026-12-07)
                               "kc32": {"inner_reduction": 32}, "kc48": {"inner_reduction": 48},
                               # coarser parallel chunks (blocking.CHUNKS_PER_CORE 8), alone and with a deeper
                               # kc: MetaSchedule@1000's BERT dense programs run 4 chunks in all (Rocket Lake)
                               "chunks1": {"chunks_per_core": 1},
                               "chunks1_kc16": {"chunks_per_core": 1, "inner_reduction": 16},
                               "chunks1_kc24": {"chunks_per_core": 1, "inner_reduction": 24},
                               # each tall micro-tile over the whole reduction wherever the sweep would run
                               # (blocking.PLANS' "resident"; "auto" only where resident_fits)
                               "resident": {"blocking": "resident"}}


def portfolio_speeds(rows: list[dict], reference: str, size: int,
                     candidates: list[str] | None = None) -> list[tuple[float, tuple[str, ...]]]:
    """Every ``size``-subset of ``candidates`` (default :data:`CANDIDATES`): the geomean of
    ``reference``'s latency over the fastest of the rules and the subset, best first (rows lacking
    the reference left out)."""
    rows = [r for r in rows if reference in r["latency_s"] and "rules" in r["latency_s"]]
    out = []
    for combo in itertools.combinations(candidates or list(CANDIDATES), size):
        speeds = [r["latency_s"][reference] / min(r["latency_s"][m] for m in ("rules", *combo) if m in r["latency_s"])
                  for r in rows]
        out.append((geomean(speeds), combo))
    return sorted(out, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quality", type=int, default=20, help="the N heaviest judging tasks (as bench.quality --tasks N)")
    ap.add_argument("--train", type=int, default=16, help="the first N workloads of the key's fixed training sample")
    ap.add_argument("--candidates", default=",".join(CANDIDATES),
                    help="comma-separated names of CANDIDATES to measure (default: all)")
    ap.add_argument("--out", default=None, help="default bench/results/rule_portfolio-<key>.json")
    args = ap.parse_args()
    chosen = [c for c in args.candidates.split(",") if c]
    if unknown := [c for c in chosen if c not in CANDIDATES]:
        ap.error(f"unknown candidate {unknown[0]!r}; one of {', '.join(CANDIDATES)}")
    refuse_beside_measuring("judge the rules' variants")

    from bench.judging import CORPUS, judging_set, training_sample
    from bench.studies.rule_variants import judge_variants
    from collectors.hardware import detect_hardware
    from collectors.rules import rule_schedule

    hw = detect_hardware("cpu")
    variants = {"rules": lambda t: rule_schedule(t, hw).schedule}
    variants |= {name: (lambda o: lambda t: rule_schedule(t, hw, **o).schedule)(CANDIDATES[name]) for name in chosen}
    t0 = time.time()
    res: dict = {"machine": machine(hw), "hardware": hw.key, "candidates": {c: CANDIDATES[c] for c in chosen}, "sets": {}}
    for name, tasks, reference in (("quality", judging_set(hw, corpus_dir=CORPUS, max_tasks=args.quality), "ms_256"),
                                   ("train", training_sample(hw.key, corpus_dir=CORPUS, n=args.train), "corpus_best")):
        rows = judge_variants(tasks, hw, variants)
        alone = portfolio_speeds(rows, reference, 0, chosen)[0][0]
        best = {size: portfolio_speeds(rows, reference, size, chosen)[:3] for size in range(1, len(chosen) + 1)}
        res["sets"][name] = {"reference": reference, "rules": alone, "rows": rows,
                             "portfolios": {size: [{"speed": s, "variants": list(c)} for s, c in b]
                                            for size, b in best.items()}}
        print(f"{name} ({len(rows)} tasks, against {reference}): the rules {alone:.3f}x; the fastest of the rules and")
        for size, b in best.items():
            print(f"  {size} variant(s): " + ", ".join(f"{'+'.join(c)} {s:.3f}x" for s, c in b))
    res["wall_s"] = round(time.time() - t0, 1)
    out = args.out or os.path.join(RESULTS, f"rule_portfolio-{hw.key.removeprefix('cpu-')}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
