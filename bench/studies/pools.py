"""Which pool of the model's programs, ranked how, gives the best top-1: measured, side by side.

    .venv/bin/python -m bench.studies.pools [--model DIR ...] [--tasks 6] [--beams 16] [--samples 32] [--outside]

For each of the N heaviest held-out tasks (``bench/judging.py``; ``--outside``: the ViT layer's
too, as ``bench/quality.py`` judges) and each model: the greedy program of every sketch,
``--beams`` beams per sketch, ``--samples`` seeded samples per sketch and the ``served`` pool
(what a served ranked request picks from: the greedy programs, ``RANK_POOL`` samples shared by
the sketches and the rules' program) are decoded, proven valid, scored by the model (likelihood) and by the model's cost
model (``cost_model.tar`` in its directory, else ``--cost-model``), and **every distinct
program is measured in one call** (``collectors.tuner.measure_schedules``: the corpus's
builder, runner and correctness check). Per pool it reports the fastest program in it (what a
perfect ranker would pick), the cost model's pick and the likelihood's pick, each as speed
relative to MetaSchedule@256's schedule from ``bench/references.py``'s cache (re-measured in
the same call). This is how the generator's ranked pool (samples, not beams) was chosen and
how a retrained model's pool is compared with the shipped one's. Writes
``bench/results/pools.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from bench._common import RESULTS, geomean, machine
from bench.judging import CORPUS, judging_set



def pools_of(task: Any, hw: Any, model: Any, tok: Any, beams: int, samples: int, ranker: Any) -> dict[str, list]:
    """Pool name -> the model's distinct candidates, proven valid: ``greedy``, ``beams_N`` and
    ``samples_N`` (likelihood order), and ``served``, the ranked pool a served request picks from
    (``tlm.service.generator.ranked_pool``: greedy, samples shared by the sketches, the rules' program)."""
    from tlm.language import apply_sentence, build_space, live_sketches, prompt_tokens
    from tlm.model.network import language_of
    from tlm.service.generator import decode_prompts, likelihood_ranked, ranked_pool

    space = build_space(task, hw)
    sketches = live_sketches(space)
    prompts = [prompt_tokens(space, s, language_of(model)) for s in sketches]
    greedy = likelihood_ranked(model, tok, prompts, sketches, decode_prompts(model, tok, task, hw, prompts, 1))
    out = {"greedy": greedy}
    if beams:
        out[f"beams_{beams}"] = likelihood_ranked(model, tok, prompts, sketches,
                                                  decode_prompts(model, tok, task, hw, prompts, beams))
    if samples:
        out[f"samples_{samples}"] = likelihood_ranked(model, tok, prompts, sketches,
                                                      decode_prompts(model, tok, task, hw, prompts, samples, sample=True))
    for name in list(out)[1:]:  # every pool holds the greedy programs too, as the ranked generator's does
        seen = {c.text for c in out[name]}
        out[name] = out[name] + [c for c in greedy if c.text not in seen]
    out["served"] = ranked_pool(task, hw, model, tok, ranker).candidates
    for c in {c.text: c for pool in out.values() for c in pool}.values():
        program = apply_sentence(c.words, task, hw)
        c.schedule = program.schedule
    return out


def one_task(task: Any, hw: Any, model: Any, tok: Any, ranker: Any, beams: int, samples: int,
             trials: int = 256) -> dict:
    from bench.quality import health_of
    from bench.references import reference_search
    from collectors.failure_modes import modes_of_schedule
    from collectors.tuner import measure_schedules

    pools = pools_of(task, hw, model, tok, beams, samples, ranker)
    distinct: dict = {}
    for pool in pools.values():  # the served pool's copy carries who wrote it (c.origin: "rules")
        distinct.update({c.text: c for c in pool})
    # MetaSchedule@256: the 256-trial prefix of the cached search of ``trials`` (bench/references.py)
    ms = reference_search(task, hw, trials, budgets=(256,)).methods["ms_256"].schedules[0]
    cands = list(distinct.values())
    pred = dict(zip(distinct, ranker.predict(task, hw, [c.schedule for c in cands])))
    records: list = []
    measure_schedules(task, hw, [c.schedule for c in cands] + [ms], tuner="bench-pools", on_records=records.extend)
    lat = {text: r.latency_s for text, r in zip(distinct, records)}
    modes = {c.text: list(modes_of_schedule(c.schedule, hw)) for c in cands}
    ref = records[-1].latency_s
    speed = lambda text: ref / lat[text] if lat[text] and ref else None  # noqa: E731
    row = {"task": task.task_name, "model": task.model, "measured": len(cands), "ms_256_s": ref, "pools": {}}
    for name, pool in pools.items():
        texts = [c.text for c in pool]
        ok = [t for t in texts if lat[t]]
        row["pools"][name] = {"size": len(texts), "errors": len(texts) - len(ok),
                              "fastest": max(speed(t) for t in ok) if ok else None,
                              "cost_model_pick": speed(max(texts, key=lambda t: pred[t])),
                              "likelihood_pick": speed(max(pool, key=lambda c: c.score).text),
                              # the static failure modes of its programs (collectors/failure_modes.py)
                              "health": health_of([modes[t] for t in texts])}
    # every measured program, so that another ranking of the same pools is judged without measuring
    # again (bench/studies/rankers.py): its sentence, latency (None: failed), likelihood score, cost-model score
    row["candidates"] = [{"text": c.text, "sketch_id": c.sketch_id, "latency_s": lat[c.text], "logprob": c.logprob,
                          "n_tokens": c.n_tokens, "score": c.score, "predicted": float(pred[c.text]),
                          "origin": c.origin,
                          "modes": modes[c.text],
                          "pools": [n for n, pool in pools.items() if any(p.text == c.text for p in pool)]}
                         for c in cands]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=None,
                    help="model directory (repeatable; default: the shipped model of this host's key)")
    ap.add_argument("--cost-model", default=None, help="cost model directory (default: the one serving each model)")
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--beams", type=int, default=16, help="beams per sketch (0: no beam pool)")
    ap.add_argument("--samples", type=int, default=32, help="seeded samples per sketch (0: no sample pool)")
    ap.add_argument("--trials", type=int, default=256,
                    help="the cached MetaSchedule search whose 256-trial best is the reference (bench.quality's --trials)")
    ap.add_argument("--outside", action="store_true", help="judge the outside-zoo tasks (a ViT layer) as well")
    ap.add_argument("--out", default=os.path.join(RESULTS, "pools.json"))
    args = ap.parse_args()

    import collectors.fast_import as fast_import
    from collectors.cost_model import CostModel
    from collectors.hardware import detect_hardware
    from tlm.model.network import load_model
    from tlm.service.catalog import chosen_model, ranker_for

    fast_import.install()
    hw = detect_hardware("cpu")
    dirs = args.model or [chosen_model(hw).entry.path]
    tasks = judging_set(hw, corpus_dir=args.corpus, max_tasks=args.tasks, outside=args.outside)
    t0 = time.time()
    res: dict = {"machine": machine(hw), "hardware": hw.key, "reference": "ms_256", "models": {}}
    for d in dirs:
        model, tok, _ = load_model(d)
        # the ranker a served request of this model uses (tlm.service.catalog.ranker_for), unless given
        ranker = CostModel.load(args.cost_model) if args.cost_model else ranker_for(d, hw.key)[0]
        name = os.path.basename(os.path.normpath(d))
        rows = []
        for task in tasks:
            rows.append(one_task(task, hw, model, tok, ranker, args.beams, args.samples, args.trials))
            print(name, task.task_name, {p: v["fastest"] and round(v["fastest"], 2) for p, v in rows[-1]["pools"].items()},
                  flush=True)
        summary = {p: {k: geomean([r["pools"][p][k] for r in rows if r["pools"][p][k]])
                       for k in ("fastest", "cost_model_pick", "likelihood_pick")} for p in rows[0]["pools"]}
        res["models"][name] = {"tasks": rows, "geomean_speed_vs_ms_256": summary}
        res["wall_s"] = round(time.time() - t0, 1)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
        print(name, json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
