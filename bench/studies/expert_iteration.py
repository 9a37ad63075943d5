"""Expert iteration (issue 19, lever 4): the closed loop, judged round by round.

A round is ``tlm adapt`` from the previous round's model: the model's own 8 best candidates
(beams) for the heaviest training tasks (ResNet-50, EfficientNet-B0; workloads shared with the
held-out models left out) are built, run, checked and stored, and the model is fine-tuned on this
key's records (the fastest 4 per task and sketch). Each round's model is then judged by
``bench.quality`` on the 8 heaviest held-out tasks, against MetaSchedule@256 and the rules, all
re-measured side by side. The loop stops when a round gains < 2% (top-1 vs MS@256).

Reproduce (on the key being judged; a round is ~20 min of measuring and fine-tuning, a judging
run ~10 min):

    cp -r data/corpus work/ei/corpus
    python -m bench.references --trials 256 --tasks 8
    python -m bench.quality --model M0 --tasks 8 --trials 256 --seeded 0 --no-outside --out work/ei/q0.json
    tlm adapt --base M0 --measurements 1000 --corpus work/ei/corpus --out work/ei/models --name ei-1
    python -m bench.quality --model work/ei/models/ei-1 --tasks 8 --trials 256 --seeded 0 --no-outside \\
        --out work/ei/q1.json                  # ... and so on, ei-2 from ei-1
    # the variant: round 0 fine-tuned on every key's records plus the loop's, round 1's cost model
    tlm dataset build --corpus work/ei/corpus --out work/ei/sets-all --per-sketch 0 --top-k 4
    tlm train --stage finetune --base M0 --workers 1 --epochs 2 --out work/ei/models --no-register \\
        --hardware cpu-rocketlake-2c,cpu-znver3-2c,cpu-znver4-2c --dataset work/ei/sets-all --name ei-1-allkeys
    cp work/ei/models/ei-1/cost_model.* work/ei/models/ei-1-allkeys/
    python -m bench.studies.expert_iteration work/ei/q0.json work/ei/q1.json ... \\
        --variant "fine-tuned on every key's records=work/ei/q1-allkeys.json" \\
        --adapt-log work/ei/ei.log --out bench/results/expert_iteration.json

The committed run: ``M0`` = ``tlm-small-cpu-all`` (``bench/hardware.py`` has its commands), on
cpu-znver4-2c; each round's result is in ``bench/results/expert_iteration_rounds/``.

Writes the per-round table (JSON and Markdown). ``--adapt-log`` is the chain's log, read for each
round's measured records and wall times (the data-supply rate: records/s of the loop's
measurements, against the key's own search collection when its slice records one).
"""
from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from bench._common import RESULTS as RESULTS_DIR, shipped_path, write_noted

RESULTS = os.path.join(RESULTS_DIR, "expert_iteration.json")
STOP_GAIN = 0.02
FIGURES = ("tlm_top1", "tlm_ranked_top1", "tlm_best_of_10", "tlm_ranked_best_of_10", "tlm_best_of_32",
           "tlm_ranked_best_of_32", "rules", "ms_64")


def round_row(path: str) -> dict:
    """One judged round: the model and each method's geomean speed vs MetaSchedule@256."""
    q = json.load(open(path))
    agg = q["aggregate"]
    row: dict[str, Any] = {"file": shipped_path(path), "model_id": q["model_id"], "hardware": q["hardware"],
                           "reference": agg["reference"], "tasks": len(q["tasks"])}
    for m in FIGURES:
        if m in agg["methods"]:
            row[m] = agg["methods"][m]["geomean_speed_vs_ref"]
    ref = agg["reference"]

    def speed(t: dict, m: str) -> float | None:
        a, b = t["methods"].get(ref, {}).get("latency_s"), t["methods"].get(m, {}).get("latency_s")
        return a / b if a and b else None

    row["per_task_top1_vs_ref"] = {t["task"]: speed(t, "tlm_top1") for t in q["tasks"]}
    return row


def adapt_rounds(log: str) -> list[dict]:
    """Per ``tlm adapt`` in a chain log: new measurements, wall time, fine-tuning time."""
    text = open(log).read()
    out = []
    for m in re.finditer(r"adapted (\S+) for \S+ in ([0-9.]+) min \((\d+) new measurements\)", text):
        before = text[: m.start()]
        steps = re.findall(r": (\d+) steps in (\d+) s", before)
        out.append({"model_id": m.group(1), "wall_s": float(m.group(2)) * 60, "records": int(m.group(3)),
                    "finetune_s": float(steps[-1][1]) if steps else None})
    return out


def _gain(r: dict, prev: dict) -> None:
    """``r``'s gain over ``prev`` in the served top-1: ranked by the cost model where both rank."""
    m = "tlm_ranked_top1" if prev.get("tlm_ranked_top1") and r.get("tlm_ranked_top1") else "tlm_top1"
    if prev.get(m) and r.get(m):
        r["gain_top1"], r["gain_of"] = r[m] / prev[m] - 1, m


def summarize(paths: list[str], log: str | None, variants: list[tuple[str, str]] = ()) -> dict:
    """The rounds in order (each judged against the one before), then ``variants``: (label, path)
    of other recipes for round 1, judged against round 0."""
    rows = [round_row(p) for p in paths]
    adapts = adapt_rounds(log) if log else []
    by_model = {a["model_id"]: a for a in adapts}
    prev = None
    for i, r in enumerate(rows):
        r["round"] = i
        a = by_model.get(r["model_id"])
        if a:
            r["adapt"] = a
            if a["finetune_s"] is not None and a["wall_s"] > a["finetune_s"]:
                a["measure_records_per_s"] = a["records"] / (a["wall_s"] - a["finetune_s"])
        if prev is not None:
            _gain(r, prev)
        prev = r
    stop = next((r["round"] for r in rows if r.get("gain_top1") is not None and r["gain_top1"] < STOP_GAIN), None)
    for label, path in variants:
        v = round_row(path)
        v["round"] = f"1 ({label})"
        if rows:
            _gain(v, rows[0])
        rows.append(v)
    return {"what": "expert iteration rounds judged on the 8 heaviest held-out tasks; speeds are geomean vs "
                    "MetaSchedule@256, re-measured in each round's own run", "rounds": rows,
            "stopped_at_round": stop,
            "stop_rule": f"a round gaining < {STOP_GAIN:.0%} in the served top-1 (ranked where both rounds rank)"}


def markdown(res: dict) -> str:
    rows = res["rounds"]
    key = rows[0]["hardware"] if rows else ""
    lines = [f"# Expert iteration on {key}", "", res["what"] + ".", "",
             "| round | model | top-1 | ranked top-1 | best-of-10 | ranked best-of-10 | best-of-32 | ranked best-of-32 | "
             "rules | MS@64 | gain (served top-1) | new records | records/s measuring |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"

    for r in rows:
        a = r.get("adapt", {})
        gain = r.get("gain_top1")
        lines.append(f"| {r['round']} | {r['model_id']} | {f(r.get('tlm_top1'))} | {f(r.get('tlm_ranked_top1'))} | "
                     f"{f(r.get('tlm_best_of_10'))} | {f(r.get('tlm_ranked_best_of_10'))} | {f(r.get('tlm_best_of_32'))} | "
                     f"{f(r.get('tlm_ranked_best_of_32'))} | "
                     f"{f(r.get('rules'))} | {f(r.get('ms_64'))} | {'-' if gain is None else f'{gain:+.0%}'} | "
                     f"{a.get('records', '-')} | {f(a.get('measure_records_per_s'))} |")
    stop = res["stopped_at_round"]
    lines += ["", f"Stop rule: {res['stop_rule']}: " + ("not reached" if stop is None else f"reached at round {stop}") + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", nargs="+", help="bench.quality JSON of round 0, 1, ... in order")
    ap.add_argument("--adapt-log", default=None, help="the chain's log (tlm adapt's output)")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL=JSON",
                    help="another recipe for round 1, judged against round 0 (repeatable)")
    ap.add_argument("--note", default=None, help="a paragraph for the Markdown: what limits the figures")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    res = summarize(args.rounds, args.adapt_log, [tuple(v.split("=", 1)) for v in args.variant])
    print(write_noted(res, args.out, markdown, args.note))


if __name__ == "__main__":
    main()
