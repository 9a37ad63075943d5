"""Pretraining volume (issue 19, lever 6): does pretraining on more sampled programs pay?

Random valid programs cost no measurement, only CPU time, so the question is whether more of them
move the held-out figures enough to pay for that time. Two pretrained ``small`` models, each
fine-tuned with the same recipe on the same sentences, each judged by ``bench.quality`` on the
same held-out tasks of this key, one judging run after the other (nothing else running):

* the base: ``tlm-small-pretrain`` (48 programs per sketch, 3 passes) -> ``tlm-small-cpu-all``;
* the candidate: a pretraining on 10x the programs per sketch -> the same fine-tune.

Reproduce (on cpu-znver4-2c: ~15 min of sampling with 2 processes, the pretraining's wall time
is in the table, 18 min of fine-tuning, ~5 min per judging run with the cached MS@256 searches):

    tlm dataset build --corpus data/corpus --out work/l6/sets-10x --per-sketch 480 --top-k 4 \\
        --hardware cpu-rocketlake-2c --workers 2
    tlm train --stage pretrain --dataset work/l6/sets-10x --preset small --workers 2 --max-steps 2000 \\
        --eval-every 1000 --eval-batches 190 --out work/l6/models --name tlm-small-pretrain-10x --no-register
    tlm train --stage finetune --hardware cpu-rocketlake-2c,cpu-znver3-2c,cpu-znver4-2c \\
        --base work/l6/models/tlm-small-pretrain-10x --dataset work/sets-all --workers 1 --epochs 4 \\
        --out work/l6/models --name cpu-all-10x --no-register
    cp work/models/tlm-small-cpu-all/cost_model.* work/l6/models/cpu-all-10x/
    python -m bench.quality --model work/models/tlm-small-cpu-all --tasks 8 --trials 256 --seeded 0 \\
        --no-outside --out work/l6/q-base.json
    python -m bench.quality --model work/l6/models/cpu-all-10x --tasks 8 --trials 256 --seeded 0 \\
        --no-outside --out work/l6/q-10x.json
    python -m bench.studies.pretraining --base work/l6/q-base.json models/tlm-small-pretrain \\
        --candidate work/l6/q-10x.json work/l6/models/tlm-small-pretrain-10x

(``work/sets-all`` and ``tlm-small-cpu-all``: ``bench/hardware.py``.) Writes
``bench/results/pretraining.json`` and the Markdown beside it.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from bench._common import RESULTS as RESULTS_DIR, shipped_path, write_noted
from bench.studies.expert_iteration import FIGURES, round_row

RESULTS = os.path.join(RESULTS_DIR, "pretraining.json")


def pretraining_of(model_dir: str) -> dict[str, Any]:
    """What a pretrained model saw and what it cost: distinct sentences, sentences passed through
    (steps x batch x workers), steps, CPU wall time, held-out loss on its own test split."""
    with open(os.path.join(model_dir, "tlm_model.json")) as fh:
        info = json.load(fh)
    m, train = info["final_metrics"], info["train"]
    seen = m["step"] * train["batch_size"] * m["workers"]
    return {"model": shipped_path(model_dir), "sentences": m["rows"]["train"], "sentences_seen": seen,
            "passes": round(seen / m["rows"]["train"], 2), "steps": m["step"], "workers": m["workers"],
            "wall_s": m["wall_s"], "eval_loss": m.get("eval_loss"), "eval_sentences": m.get("eval_sentences")}


def compare(base: tuple[str, str], candidate: tuple[str, str]) -> dict[str, Any]:
    """Both judged models side by side, with the candidate's speed relative to the base's per figure."""
    rows = []
    for label, (quality, pretrained) in (("base", base), ("candidate", candidate)):
        row = round_row(quality) | {"label": label, "pretraining": pretraining_of(pretrained)}
        row.pop("per_task_top1_vs_ref")
        rows.append(row)
    b, c = rows
    ratio = {f: c[f] / b[f] for f in FIGURES if b.get(f) and c.get(f)}
    return {"what": "pretraining volume (lever 6): the same fine-tune and judging, two pretrainings",
            "hardware": b["hardware"], "reference": b["reference"], "models": rows,
            "candidate_vs_base": ratio,
            # the same network, so its compute goes with the sentences passed through (the wall
            # times may come from different machines: the shipped pretraining's is not this one's)
            "compute_ratio": c["pretraining"]["sentences_seen"] / b["pretraining"]["sentences_seen"]}


def markdown(res: dict) -> str:
    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"

    shown = [x for x in FIGURES if any(x in r for r in res["models"])]
    lines = [f"# Pretraining volume on {res['hardware']}", "",
             f"Speeds are geomean vs {res['reference']} on the same held-out tasks, each model judged in its own "
             "`bench.quality` run, back to back.", "",
             "| model | pretrained on (distinct) | sentences seen | passes | pretraining wall (s) | "
             + " | ".join(shown) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(shown)]
    for r in res["models"]:
        p = r["pretraining"]
        lines.append(f"| {r['model_id']} ({r['label']}) | {p['sentences']} | {p['sentences_seen']} | {p['passes']} | "
                     f"{p['wall_s']:.0f} | " + " | ".join(f(r.get(x)) for x in shown) + " |")
    lines.append(f"| candidate / base | | {res['compute_ratio']:.2f} | | | " + " | ".join(f(res["candidate_vs_base"].get(x)) for x in shown) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", nargs=2, required=True, metavar=("QUALITY_JSON", "PRETRAINED_DIR"))
    ap.add_argument("--candidate", nargs=2, required=True, metavar=("QUALITY_JSON", "PRETRAINED_DIR"))
    ap.add_argument("--note", default=None, help="a paragraph for the Markdown: what limits the figures")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    res = compare(tuple(args.base), tuple(args.candidate))
    print(write_noted(res, args.out, markdown, args.note))


if __name__ == "__main__":
    main()
