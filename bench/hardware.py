"""Any machine it lands on: one model across hardware keys, zero- and few-shot, how far schedules travel.

    python -m bench.hardware --own DIR --model NAME=DIR ... [--tasks 8] [--travel 12]

Everything is measured on this machine (its key is detected: a schedule runs only where it was
measured). Two parts, each judged in one measurement call per task (``collectors.judge``: one
evaluator setting, correctness-checked), side by side:

- **models**: on the heaviest held-out tasks (``bench.judging.judging_set``: never trained on by
  any of the models), the served top-1 of this key's own model (``--own``) and of every other
  model given as ``NAME=DIR`` (ranked by the cost model in its directory when it has one, as the
  server does; else greedy), beside the rules and, where the corpus holds it, this key's best of
  its 64-trial MetaSchedule search. Each model's figure is its speed relative to the own model's
  top-1 (geomean over tasks; above 1 is faster). Names the report knows: ``zero_shot`` (a model
  trained on every key but this one), ``one_model`` (trained on every key, this one included),
  ``nearest`` (what the server answers with when the key has no model), ``few_shot_<N>`` (the
  zero-shot model adapted with N local measurements, ``tlm adapt``).
- **travel** (``--travel N``): for the N heaviest workloads measured on this key and on others,
  each other key's best schedule run here against this key's own best (how far a schedule travels).

The models of the committed run, from ``data/corpus`` (each command also in the closing note of issue 21)::

    tlm dataset build --corpus data/corpus --out work/sets-rz3 --per-sketch 0 --top-k 4 \
        --hardware cpu-rocketlake-2c,cpu-znver3-2c                       # zero_shot's sentences
    tlm dataset build --corpus data/corpus --out work/sets-all --per-sketch 0 --top-k 4
    tlm train --stage finetune --base models/tlm-small-pretrain --workers 1 --epochs 4 --out work/models \
        --no-register --hardware cpu-rocketlake-2c,cpu-znver3-2c --dataset work/sets-rz3 --name tlm-small-cpu-rz3
    #   the same with --hardware cpu-znver4-2c --dataset work/sets-all --name tlm-small-znver4-2c (own),
    #   and --hardware cpu-rocketlake-2c,cpu-znver3-2c,cpu-znver4-2c ... --name tlm-small-cpu-all (one_model)
    tlm cost-model fit --corpus data/corpus --hardware cpu-znver4-2c --out work/models/tlm-small-znver4-2c
    #   copied into tlm-small-cpu-all; tlm-small-cpu-rz3 gets the shipped rocketlake model's (no znver4 data)
    tlm adapt --measurements N --base work/models/tlm-small-cpu-rz3 --corpus work/adapt-N --out work/models \
        --name few-shot-N                                                # N = 200, 1000

Writes ``bench/results/hardware.json`` (keys ``keys``, ``zero_shot``, ``one_model``, ``few_shot``,
``travel``, ``targets``) and ``hardware.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import Any

from bench._common import REPO, geomean, machine, shipped_path
from bench.judging import CORPUS

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def key_table(corpus_dir: str) -> dict:
    """Per hardware key of the corpus: records, measured, errors, workloads, models collected."""
    from storage import Corpus

    with Corpus.open(corpus_dir) as c:
        st = c.stats()["by_hardware"]
        models_of: dict[str, set] = {}
        wl_models = {w["workload_key"]: set(w["models"]) for w in c.workloads()}
        for key in st:
            wks = set(c.best_latencies(key))
            models_of[key] = set().union(*(wl_models.get(w, set()) for w in wks)) if wks else set()
    return {k: {"records": v["records"], "ok": v["ok"], "errors": v["errors"], "workloads": v["workloads"],
                "models": sorted(models_of[k])} for k, v in sorted(st.items())}


def served_top1(task: Any, hw: Any, model_dir: str, loaded: dict, *, greedy: bool = False) -> Any:
    """The schedule the server would answer with from this model directory (Method); with
    ``greedy``, the model's greedy program without its cost model (None when it has none)."""
    from collectors.judge import Method
    from tlm.model.network import load_model
    from tlm.service.catalog import ranker_of
    from tlm.service.generator import generate

    if model_dir not in loaded:
        model, tok, _ = load_model(model_dir)
        loaded[model_dir] = (model, tok, ranker_of(model_dir))
    model, tok, ranker = loaded[model_dir]
    if greedy and ranker is None:
        return None
    g = generate(task, hw, model, tok, k=1, ranker=None if greedy else ranker)
    return Method([g.candidates[0].schedule], g.generate_s + g.check_s + g.rank_s)


def corpus_best(corpus: Any, task: Any, key: str) -> Any:
    """The fastest stored schedule of ``task`` on ``key`` (Method) or None."""
    from collectors.judge import Method
    from collectors.tir import schedule_of

    top = corpus.top_k(task.workload_key, key, 1)
    if top.num_rows == 0 or top["latency_s"][0].as_py() is None:
        return None
    return Method([schedule_of(task.mod, top["trace_json"][0].as_py())], 0.0)


def judge_models(hw: Any, tasks: list, models: dict[str, str], corpus_dir: str) -> list[dict]:
    from collectors.judge import judge, rules_method
    from storage import Corpus

    loaded: dict = {}
    rows = []
    with Corpus.open(corpus_dir) as corpus:
        for i, task in enumerate(tasks):
            methods = {name: served_top1(task, hw, d, loaded) for name, d in models.items()}
            methods |= {f"{name}_greedy": m for name, d in models.items()
                        if (m := served_top1(task, hw, d, loaded, greedy=True)) is not None}
            methods["rules"] = rules_method(task, hw)
            ms = corpus_best(corpus, task, hw.key)
            if ms is not None:
                methods["ms_64_corpus"] = ms
            res = judge(task, hw, methods)
            rows.append({"task": task.task_name, "model": task.model, "workload_key": task.workload_key,
                         "flops": task.flops, "methods": res})
            print(f"[{i + 1}/{len(tasks)}] {task.task_name}: {_latencies(res)}", flush=True)
    return rows


def _latencies(judged: dict) -> str:
    """One task's judged latencies as one progress line."""
    return ", ".join(f"{n} {v['latency_s'] * 1e6:.0f}us" for n, v in judged.items() if v.get("latency_s"))


def relative(rows: list[dict], name: str, ref: str = "own") -> dict:
    """``name``'s speed relative to ``ref`` per task (ref latency / its latency) and the geomean."""
    per = {}
    for r in rows:
        a, b = r["methods"].get(ref, {}).get("latency_s"), r["methods"].get(name, {}).get("latency_s")
        per[r["task"]] = a / b if a and b else None
    vals = [v for v in per.values() if v]
    return {"geomean": geomean(vals), "worst": min(vals) if vals else None, "tasks": per}


def summarize(res: dict) -> None:
    """Every judged method's speed relative to the own model and to the rules (in ``res``)."""
    names = sorted({n for r in res["rows"] for n in r["methods"]} - {"own", "torch_eager"})
    res["relative"] = {n: relative(res["rows"], n) for n in names}
    res["vs_rules"] = {n: relative(res["rows"], n, "rules") for n in ["own", *names] if n != "rules"}
    res["zero_shot"] = res["relative"].get("zero_shot")
    res["one_model"] = res["relative"].get("one_model")


def few_shot(res: dict) -> None:
    """The few-shot curve: N = 0 (the zero-shot model) and every ``few_shot_<N>`` model judged, as
    served now: a model directory without a cost model (``tlm adapt`` below its record threshold)
    is served greedy, which is exactly its ``_greedy`` row."""
    from tlm.service.catalog import ranker_of

    walls = res.get("adapt_wall_s") or {}
    res["few_shot"] = []
    for n in res["relative"]:
        m = re.fullmatch(r"few_shot_(\d+)", n)
        if not m:
            continue
        d = os.path.join(REPO, res["models"][n])
        served = n if not os.path.isdir(d) or ranker_of(d) is not None else f"{n}_greedy"
        res["few_shot"].append({"n": int(m.group(1)), "model": n, "served": served, **res["relative"][served],
                                "adapt_wall_s": walls.get(m.group(1))})
    if res["zero_shot"]:
        res["few_shot"].insert(0, {"n": 0, "model": "zero_shot", **res["zero_shot"], "adapt_wall_s": None})
    res["few_shot"].sort(key=lambda f: f["n"])


def travel(hw: Any, corpus_dir: str, n: int) -> dict:
    """Each other key's best schedule of a workload, run here, against this key's own best."""
    from collectors.judge import judge
    from collectors.tasks import task_from_index
    from storage import Corpus

    with Corpus.open(corpus_dir) as corpus:
        keys = sorted(corpus.stats()["by_hardware"])
        best = {k: corpus.best_latencies(k) for k in keys}
        shared = [w for w in corpus.workloads() if w["workload_key"] in best.get(hw.key, {})
                  and any(w["workload_key"] in best[k] for k in keys if k != hw.key)]
        shared.sort(key=lambda w: -(w.get("flops") or 0) * max(w["models"].values() or [1]))
        rows = []
        for w in shared[:n]:
            task = task_from_index(w)
            methods = {f"best_of_{k}": m for k in keys if (m := corpus_best(corpus, task, k)) is not None}
            res = judge(task, hw, methods, torch_eager=False)
            rows.append({"task": task.task_name, "workload_key": task.workload_key, "flops": task.flops,
                         "methods": res})
            print(f"travel {task.task_name}: {_latencies(res)}", flush=True)
    own = f"best_of_{hw.key}"
    return {"to": hw.key, "workloads": len(rows),
            "from": {k: relative(rows, f"best_of_{k}", own) for k in keys if k != hw.key},
            "rows": rows}


def targets(res: dict) -> list[dict]:
    out = [{"figure": "keys in data/corpus", "value": len(res["keys"]), "target": ">= 2 CPU",
            "met": sum(k.startswith("cpu-") for k in res["keys"]) >= 2}]
    zs = res.get("zero_shot")
    if zs:
        out.append({"figure": "zero-shot top-1 vs the key's own model", "value": zs["geomean"], "target": ">= 0.7",
                    "met": bool(zs["geomean"] and zs["geomean"] >= 0.7)})
    few = [f for f in res.get("few_shot", []) if f["n"] and f["n"] <= 1000 and f["geomean"]]
    if few:
        best = max(few, key=lambda f: f["geomean"])
        out.append({"figure": f"after <= 1000 local measurements (N={best['n']}), top-1 vs own model",
                    "value": best["geomean"], "target": ">= 0.95", "met": best["geomean"] >= 0.95})
    timed = [f for f in res.get("few_shot", []) if f.get("adapt_wall_s") and f["n"] <= 1000]
    if timed:
        t = max(timed, key=lambda f: f["n"])
        out.append({"figure": f"tlm adapt wall time, N={t['n']}, min", "value": t["adapt_wall_s"] / 60,
                    "target": "<= 20 (N = 1000)", "met": t["adapt_wall_s"] <= 1200})
    return out


def report_md(res: dict) -> str:
    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [f"# Hardware: {res['hardware']} ({res['machine']['cpu']})", "",
             "Every figure is measured on this machine, one measurement call per task; speeds are relative to "
             "this key's own model's served top-1 (above 1 is faster).", *[f"\n{n}" for n in res.get("notes", [])],
             "", "## Keys in the corpus", "",
             "| key | records | measured | workloads | models |", "|---|---:|---:|---:|---|"]
    for k, v in res["keys"].items():
        lines.append(f"| {k} | {v['records']} | {v['ok']} | {v['workloads']} | {', '.join(v['models'])} |")
    if res.get("models"):
        lines += ["", f"## Models on the {len(res['rows'])} heaviest held-out tasks", "",
                  "| method | model directory | speed vs own (geomean) | worst task | speed vs rules (geomean) |",
                  "|---|---|---:|---:|---:|"]
        for name in ["own", *res["relative"]]:
            r = res["relative"].get(name, {"geomean": 1.0, "worst": 1.0})
            base = name.removesuffix("_greedy")
            what = res["models"].get(base, "(baseline)") + (" greedy, no cost model" if name != base else "")
            lines.append(f"| {name} | {what} | {f(r['geomean'])} | {f(r['worst'])} | "
                         f"{f(res.get('vs_rules', {}).get(name, {}).get('geomean'))} |")
    if res.get("few_shot"):
        lines += ["", "## Few-shot: the zero-shot model adapted with N measurements on this key (`tlm adapt`)", "",
                  "| N | served as | speed vs own | worst | speed vs rules | tlm adapt wall time (min) |",
                  "|---:|---|---:|---:|---:|---:|"]
        for fs in res["few_shot"]:
            served = fs.get("served") or fs.get("model", "")
            wall = fs.get("adapt_wall_s")
            lines.append(f"| {fs['n']} | {served} | {f(fs['geomean'])} | {f(fs.get('worst'))} | "
                         f"{f(res.get('vs_rules', {}).get(served, {}).get('geomean'))} | "
                         f"{'-' if not wall else f'{wall / 60:.1f}'} |")
    if res.get("travel"):
        t = res["travel"]
        lines += ["", f"## How far a schedule travels: other keys' best, run on {t['to']} ({t['workloads']} workloads)",
                  "", "| from key | speed vs this key's best (geomean) | worst |", "|---|---:|---:|"]
        for k, r in t["from"].items():
            lines.append(f"| {k} | {f(r['geomean'])} | {f(r['worst'])} |")
    lines += ["", "## Targets", "", "| figure | value | target | met |", "|---|---:|---|---|"]
    for t in res["targets"]:
        lines.append(f"| {t['figure']} | {f(t['value'])} | {t['target']} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--own", default=None, metavar="DIR", help="this key's own model (the reference)")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=DIR", help="another model to judge")
    ap.add_argument("--adapt-wall-s", action="append", default=[], metavar="N=SECONDS",
                    help="how long `tlm adapt` took for few_shot_<N> (reported beside its figure)")
    ap.add_argument("--tasks", type=int, default=8, help="heaviest held-out tasks judged (0: none)")
    ap.add_argument("--travel", type=int, default=12, help="workloads of the cross-key figure (0: none)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "hardware.json"))
    ap.add_argument("--note", action="append", default=None, help="a line the report must say (what limits a figure)")
    ap.add_argument("--report-only", action="store_true", help="recompute the summaries and Markdown of --out "
                    "from its measured rows (no measurement)")
    args = ap.parse_args(argv)
    if args.report_only:
        with open(args.out) as fh:
            res = json.load(fh)
        res.setdefault("adapt_wall_s", {str(f["n"]): f["adapt_wall_s"] for f in res.get("few_shot", [])
                                        if f.get("adapt_wall_s")})
        if res.get("rows"):
            summarize(res)
            few_shot(res)
        res["targets"] = targets(res)
        if args.note is not None:
            res["notes"] = args.note
        return _write(res, args.out)

    import logging

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    from bench.judging import check_unseen, judging_set
    from collectors.hardware import detect_hardware
    from tlm.model.network import read_model_info

    hw = detect_hardware("cpu")
    models = {}
    for spec in args.model:
        name, _, d = spec.partition("=")
        if not d or not os.path.isdir(d):
            raise SystemExit(f"error: --model {spec!r} is not NAME=DIR of a model directory")
        models[name] = d
    if args.own:
        models = {"own": args.own, **models}
    t0 = time.time()
    res: dict[str, Any] = {"machine": machine(hw), "hardware": hw.key, "keys": key_table(args.corpus),
                           "models": {n: shipped_path(d) for n, d in models.items()}}
    if models and args.tasks:
        tasks = judging_set(hw, corpus_dir=args.corpus, max_tasks=args.tasks, outside=False)
        for name, d in models.items():
            try:
                check_unseen(name, read_model_info(d), tasks)
            except ValueError as exc:
                raise SystemExit(f"error: {exc}") from None
        res["rows"] = judge_models(hw, tasks, models, args.corpus)
        summarize(res)
        res["adapt_wall_s"] = {k: float(v) for k, v in (s.split("=") for s in args.adapt_wall_s)}
        few_shot(res)
    if args.travel:
        res["travel"] = travel(hw, args.corpus, args.travel)
    res["targets"] = targets(res)
    res["notes"] = args.note or []
    res["wall_s"] = round(time.time() - t0, 1)
    return _write(res, args.out)


def _write(res: dict, out: str) -> int:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=2)
    md = report_md(res)
    with open(os.path.splitext(out)[0] + ".md", "w") as fh:
        fh.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
