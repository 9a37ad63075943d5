"""Does the student write its teacher's programs on the workloads it was trained on (issue 32, item 3)?

    .venv/bin/python -m bench.studies.fit --dataset SETS --model DIR [--model DIR ...] [--out F]

Fit before generalization, read without measuring anything. For every (workload, sketch) of the
fine-tuning set's split (``SETS/finetune.parquet`` from ``tlm dataset build --per-sketch 0``; a
model trained on the ``train`` split is judged on that split), the teacher's program is its best
row (label 1.0: the corpus's fastest record of that sketch). Per model:

- ``forced_best``: decision-word accuracy teacher-forced on those best rows (memorising them: 1.0),
  ``forced_all`` on every row of the split (rows of one prompt disagree: below 1.0 by construction);
- ``greedy_is_best``: the share of (workload, sketch) whose greedy program (the generator's
  constrained decoding) is word for word the teacher's best; ``greedy_in_set``: is one of the
  split's rows of that sketch at all; ``greedy_words``: decision words equal to the best's, position
  by position (0 where the lengths differ);
- ``same_prompt``: sketches whose prompt is word for word another sketch's of the same task (the
  model cannot tell them apart: issue 32, item 2) and ``same_prompt_other_best`` those of them whose
  best programs differ (no model fits both); ``greedy_twins``: sketches whose greedy program is
  another sketch's.

Writes JSON (``--out``; default ``bench/results/fit.json``, one entry per model and split, replaced
when judged again). The recipes of ``bench/results/fit.json`` (issue 32, item 3; Zen 3)::

    tlm dataset build --corpus data/corpus --out work/fit/top4 --per-sketch 0 --top-k 4 --hardware cpu-znver3-2c
    tlm dataset build --corpus data/corpus --out work/fit/top1 --per-sketch 0 --top-k 1 --hardware cpu-znver3-2c
    tlm train --stage finetune --hardware cpu-znver3-2c --base models/tlm-small-pretrain --workers 2 \
        --dataset work/fit/top4 --epochs 4 --lr 3e-4 --out work/fit/models --name A-top4-e4 --no-register  # shipped recipe
    tlm train ... --dataset work/fit/top1 --epochs 64 --lr 1e-3 --name C-top1-e64             # the best only, fitted
    python -m bench.studies.fit --dataset work/fit/top4 [--split test] --model work/fit/models/A-top4-e4 ...
    python -m bench.learning student [--set heldout --tasks 8] --model work/fit/models/C-top1-e64 --out F.json  # measured

(``bench/results/fit_students.json`` holds those measured judgements.)
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from typing import Any

from bench._common import RESULTS

OUT = os.path.join(RESULTS, "fit.json")


def groups(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """(workload, sketch) -> its rows, the best (highest label) first."""
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in rows:
        out[(r["workload_key"], r["sketch_id"])].append(r)
    for g in out.values():
        g.sort(key=lambda r: -(r["label"] or 0.0))
    return dict(out)


def split_words(row: dict) -> tuple[list[str], list[str]]:
    words = row["text"].split()
    return words[: row["prompt_len"]], words[row["prompt_len"]:]


def forced_accuracy(model: Any, tokenizer: Any, rows: list[dict], *, batch_size: int = 16) -> float:
    """Teacher-forced decision-word accuracy (argmax) over ``rows``."""
    import torch

    from tlm.model.batching import batch_encoding, encode_batch, masked_loss

    enc = batch_encoding(tokenizer, model.config.n_positions)
    correct = counted = 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            chunk = rows[i: i + batch_size]
            b = encode_batch([r["text"] for r in chunk], [r["prompt_len"] for r in chunk], **enc)
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
            _, _, c, n = masked_loss(out.logits, b["labels"], b["weights"])
            correct, counted = correct + int(c), counted + int(n)
    return correct / max(1, counted)


def greedy_fit(model: Any, tokenizer: Any, by_group: dict, tasks: dict, hardware: Any) -> dict:
    """The greedy program of every group's prompt against the group's rows (module docstring), for
    every group and for the searched kinds' alone (``bench.judging.SEARCHED_KINDS``: a norm's sketch
    has a word or two to get right, a convolution's dozens)."""
    from bench.judging import SEARCHED_KINDS
    from tlm.service.generator import decode_prompts

    by_task: dict[str, list[tuple[int, list[dict]]]] = defaultdict(list)
    for (wk, sk), g in by_group.items():
        by_task[wk].append((sk, g))
    rows, twins = [], 0  # per group: (searched, is best, in set, words)
    for wk, sketches in by_task.items():
        prompts = [split_words(g[0])[0] for _, g in sketches]
        written = [tuple(new) for _, new, _ in decode_prompts(model, tokenizer, tasks[wk], hardware, prompts, 1)]
        for (sk, g), new in zip(sketches, written):
            best = tuple(split_words(g[0])[1])
            rows.append((tasks[wk].op_kind in SEARCHED_KINDS, new == best,
                         any(new == tuple(split_words(r)[1]) for r in g),
                         sum(a == b for a, b in zip(new, best)) / len(best) if len(new) == len(best) else 0.0))
        twins += sum(written.count(w) > 1 for w in written)
    out: dict[str, Any] = {"greedy_twins": twins}
    for suffix, chosen in (("", rows), ("_searched", [r for r in rows if r[0]])):
        n = max(1, len(chosen))
        out.update({f"greedy_is_best{suffix}": sum(r[1] for r in chosen) / n,
                    f"greedy_in_set{suffix}": sum(r[2] for r in chosen) / n,
                    f"greedy_words{suffix}": sum(r[3] for r in chosen) / n})
    out["groups_searched"] = sum(r[0] for r in rows)
    return out


def prompt_clashes(by_group: dict) -> dict:
    """Sketches of one task that share their prompt, and those of them whose best programs differ."""
    by_prompt: dict[tuple[str, tuple], list[tuple]] = defaultdict(list)
    for (wk, _), g in by_group.items():
        prompt, best = split_words(g[0])
        by_prompt[(wk, tuple(prompt))].append(tuple(best))
    shared = [bests for bests in by_prompt.values() if len(bests) > 1]
    return {"same_prompt": sum(len(b) for b in shared),
            "same_prompt_other_best": sum(len(b) for b in shared if len(set(b)) > 1)}


def fit(model_dir: str, dataset: str, split: str = "train", corpus_dir: str | None = None) -> dict:
    """One model's fit figures on ``split`` of ``dataset`` (module docstring)."""
    import pyarrow.parquet as pq

    from bench.judging import CORPUS
    from collectors.hardware import hardware_for_key
    from collectors.tasks import task_from_index
    from storage import Corpus
    from tlm.model.network import load_model

    rows = [r for r in pq.read_table(os.path.join(dataset, "finetune.parquet")).to_pylist() if r["split"] == split]
    keys = {r["hardware_key"] for r in rows}
    if len(keys) != 1:
        raise SystemExit(f"error: {dataset} holds {len(keys)} hardware keys in its {split} split; build it with "
                         "--hardware KEY")
    key = keys.pop()
    by_group = groups(rows)
    wanted = {wk for wk, _ in by_group}
    with Corpus.open(corpus_dir or CORPUS) as corpus:
        tasks = {w["workload_key"]: task_from_index(w) for w in corpus.workloads() if w["workload_key"] in wanted}
        hardware = hardware_for_key(key, corpus.hardware_info(key))
    model, tokenizer, _ = load_model(model_dir)
    t0 = time.time()
    out = {"model": model_dir, "dataset": dataset, "split": split, "hardware_key": key, "rows": len(rows),
           "groups": len(by_group), "workloads": len(tasks),
           "forced_best": forced_accuracy(model, tokenizer, [g[0] for g in by_group.values()]),
           "forced_all": forced_accuracy(model, tokenizer, rows),
           **greedy_fit(model, tokenizer, by_group, tasks, hardware), **prompt_clashes(by_group)}
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", required=True, help="a directory of `tlm dataset build` (one hardware key)")
    ap.add_argument("--model", action="append", required=True, help="a model directory (repeatable)")
    ap.add_argument("--split", default="train", choices=("train", "test"))
    ap.add_argument("--corpus", default=None, help="the corpus the set was built from (default data/corpus)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    res = json.load(open(args.out)) if os.path.exists(args.out) else {}
    for m in args.model:
        entry = fit(m, args.dataset, args.split, args.corpus)
        print(json.dumps(entry), flush=True)
        res[f"{os.path.basename(os.path.normpath(m))}@{args.split}"] = entry
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
