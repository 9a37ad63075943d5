"""Where does a fitted student lose to its teacher: the programs it writes, or the sketch it picks?

    .venv/bin/python -m bench.studies.sketch_choice --model DIR [--tasks 16] [--out F]

Static (nothing measured). On the fixed training sample (``bench.judging.training_sample``), per
task: the teacher's best program (the corpus's fastest record) and its sketch; the model's greedy
program of every sketch (``tlm.service.generator.decode_prompts``, scored as the generator does); whether
the teacher's best program is one of them (its decisions written in its own sketch); and which
sketch's program each ranking would serve: the likelihood (the served greedy top-1) and the key's
cost model (``tlm.service.catalog.ranker_for``) over those greedy programs alone. Issue 32, item 3:
a model fitted on the best record per sketch (``bench/studies/fit.py``) writes the teacher's best
program in its sketch on most training tasks; what is left is choosing the sketch.
Writes JSON (``--out``, default ``bench/results/sketch_choice.json``, one entry per model).
"""
from __future__ import annotations

import argparse
import json
import os
from bench._common import RESULTS

OUT = os.path.join(RESULTS, "sketch_choice.json")


def sketch_choice(model_dir: str, n: int) -> dict:
    """Per task of the training sample: the teacher's sketch, and what each ranking picks (module docstring)."""
    from bench.learning import _sample
    from collectors.hardware import detect_hardware
    from tlm.language import apply_sentence, build_space, encode, live_sketches, prompt_tokens
    from tlm.model.network import language_of, load_model
    from tlm.service.catalog import ranker_for
    from tlm.service.generator import decode_prompts, likelihood_ranked

    hw = detect_hardware("cpu")
    tasks, best = _sample(hw, None, n)
    model, tok, _ = load_model(model_dir)
    ranker, ranked_by = ranker_for(model_dir, hw.key)
    rows = []
    for t in tasks:
        teacher = encode(t, hw, best[t.workload_key]["trace_json"])
        space = build_space(t, hw)
        sketches = live_sketches(space)
        prompts = [prompt_tokens(space, sk, language_of(model)) for sk in sketches]
        cands = likelihood_ranked(model, tok, prompts, sketches, decode_prompts(model, tok, t, hw, prompts, 1))
        for c in cands:
            c.schedule = apply_sentence(c.words, t, hw).schedule
        hit = [c.sketch_id == teacher.sketch_id and tuple(c.decisions) == tuple(teacher.decisions) for c in cands]
        row = {"task": t.task_name, "teacher_sketch": teacher.sketch_id, "sketches": [c.sketch_id for c in cands],
               "teacher_in_greedy": any(hit), "likelihood_picks": cands[0].sketch_id,
               "likelihood_picks_teacher": hit[0]}
        if ranker is not None:
            preds = [float(p) for p in ranker.predict(t, hw, [c.schedule for c in cands])]
            top = max(range(len(cands)), key=lambda i: preds[i])
            row.update(cost_model_picks=cands[top].sketch_id, cost_model_picks_teacher=hit[top], predicted=preds)
        rows.append(row)
        print(row, flush=True)
    count = lambda k: sum(bool(r.get(k)) for r in rows)  # noqa: E731
    return {"model": model_dir, "ranked_by": ranked_by, "hardware_key": hw.key, "tasks": rows,
            "teacher_in_greedy": count("teacher_in_greedy"), "likelihood_picks_teacher": count("likelihood_picks_teacher"),
            "cost_model_picks_teacher": count("cost_model_picks_teacher"), "n": len(rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    res = json.load(open(args.out)) if os.path.exists(args.out) else {}
    entry = sketch_choice(args.model, args.tasks)
    res[os.path.basename(os.path.normpath(args.model))] = entry
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print({k: entry[k] for k in ("n", "teacher_in_greedy", "likelihood_picks_teacher", "cost_model_picks_teacher")})


if __name__ == "__main__":
    main()
