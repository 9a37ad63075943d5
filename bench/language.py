"""Benchmark of the tensor language: encode/decode throughput, sentence lengths, legal-word cost.

Side by side with the plain library path: validating a candidate the MetaSchedule way
(``Trace.apply_to_schedule`` on a fresh schedule + every postprocessor), which is what
check-and-drop generation pays per candidate, against our per-step cost of computing the
legal words while replaying incrementally (target: <= 1 ms per decision step).

Tasks are real: the heaviest few of each op kind from small zoo models (ResNet-50, BERT,
GPT-2; ``collectors.tasks.extract_tasks(..., small=True)``) on this machine's CPU.

Two more side-by-side comparisons:

* **CUDA validity** (programs are built and checked, not run: no GPU is needed): for every
  task of the ``--cuda-models`` on an H200-like target, the share of MetaSchedule's own random
  samples of each sketch that its postprocessors accept, against the share of constrained
  sentences (``legal_next_tokens`` walks) that are valid as written. Sketches that give no
  valid program at all are counted apart.
* **Model step**: one incremental GPT-2 decoding step (random weights, KV cache, batch 1) at
  the sizes the TLM uses, so the grammar's cost per step reads as a fraction of the model's.

    .venv/bin/python -m bench.language [--per-kind 2] [--walks 3] [--cuda-models resnet50,bert_base]
                                       [--out bench/results/language.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import time
from collections import defaultdict
from typing import Any

from bench._common import machine, percentile

logger = logging.getLogger(__name__)


def pick_tasks(hw: Any, models: list[str], per_kind: int) -> list:
    from collectors.tasks import extract_tasks

    chosen, seen = [], defaultdict(int)
    for m in models:
        for t in extract_tasks(m, hw, small=True):
            if seen[t.op_kind] < per_kind:
                seen[t.op_kind] += 1
                chosen.append(t)
    return chosen


def _summary_ms(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "mean_ms": round(1e3 * statistics.fmean(xs), 4), "p50_ms": round(1e3 * percentile(xs, 50), 4),
            "p95_ms": round(1e3 * percentile(xs, 95), 4), "max_ms": round(1e3 * max(xs), 4)}


def run(per_kind: int, walks: int, seed: int) -> dict:
    import collectors.fast_import as fast_import

    fast_import.install()
    from collectors.hardware import detect_hardware
    from tvm.s_tir.schedule import Schedule, Trace

    import tlm.language.sentences as L
    from collectors.sketches import postprocs
    from tlm.language import apply_sentence
    from tlm.language import decode, encode, legal_next_tokens, prompt_tokens
    from tlm.language.replay import clear_location_cache
    from tlm.language.space import build_space

    rng = random.Random(seed)
    hw = detect_hardware("cpu")
    t0 = time.perf_counter()
    tasks = pick_tasks(hw, ["resnet50", "bert_base", "gpt2"], per_kind)
    extract_s = time.perf_counter() - t0

    # -- design spaces and sampled traces ------------------------------------------------
    traces, space_s = [], []
    for task in tasks:
        t = time.perf_counter()
        space = build_space(task, hw)
        space_s.append(time.perf_counter() - t)
        postprocs(task, hw)
        for sk in space.sketches:
            sch = Schedule(task.mod, seed=rng.randint(1, 10**6))
            Trace(sk.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            traces.append((task, sch.trace))

    # -- encode / decode throughput; lengths per op kind ----------------------------------
    sentences, enc_s, dec_s = [], [], []
    lengths: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task, tr in traces:
        t = time.perf_counter()
        s = encode(task, hw, tr)
        enc_s.append(time.perf_counter() - t)
        sentences.append((task, s))
        lengths[task.op_kind].append((len(s.tokens), len(s.decisions)))
    clear_location_cache()
    for task, s in sentences:
        t = time.perf_counter()
        decode(s, task, hw)
        dec_s.append(time.perf_counter() - t)

    # -- plain library path: apply whole trace + postprocs per candidate -------------------
    plain_apply, plain_full = [], []
    for task, tr in traces:
        t = time.perf_counter()
        sch = Schedule(task.mod)
        tr.apply_to_schedule(sch, remove_postproc=True)
        plain_apply.append(time.perf_counter() - t)
        sch.enter_postproc()
        for p in postprocs(task, hw):
            p.apply(sch)
        plain_full.append(time.perf_counter() - t)

    # -- constrained random walks: cost of legal words per decision step -------------------
    def walk_all(label: str) -> dict:
        per_kind_steps: dict[str, list[float]] = defaultdict(list)
        all_steps, per_sentence, checked = [], [], 0
        for task in tasks:
            space = build_space(task, hw)
            for sk in space.sketches:
                for _ in range(walks):
                    words = prompt_tokens(space, sk)
                    start = time.perf_counter()
                    while words[-1] != L.EOS:
                        t = time.perf_counter()
                        legal = legal_next_tokens(words, task, hw)
                        dt = time.perf_counter() - t
                        cur = None
                        st = L._STATES._states.get((space.uid, tuple(words)))
                        if st is not None and not st.ended:
                            cur = st.replay.current()
                        kind = (cur[0].kind if cur else "end")
                        per_kind_steps[kind].append(dt)
                        all_steps.append(dt)
                        words.append(rng.choice(sorted(legal)))
                    per_sentence.append(time.perf_counter() - start)
                    apply_sentence(words, task, hw)  # raises if anything is invalid
                    checked += 1
        return {"label": label, "sentences_checked_valid": checked, "per_step": _summary_ms(all_steps),
                "per_step_by_choice": {k: _summary_ms(v) for k, v in sorted(per_kind_steps.items())},
                "per_sentence": _summary_ms(per_sentence)}

    clear_location_cache()
    cold = walk_all("cold caches (first walks)")
    warm = walk_all("warm compute-location cache")

    n = len(traces)
    result = {
        "machine": machine(hw),
        "tasks": [{"task": t.task_name, "op_kind": t.op_kind, "model": t.model} for t in tasks],
        "extract_tasks_s": round(extract_s, 2),
        "build_space": _summary_ms(space_s),
        "sentences": n,
        "encode": {"sentences_per_s": round(n / sum(enc_s), 1), **_summary_ms(enc_s)},
        "decode_checked": {"sentences_per_s": round(n / sum(dec_s), 1), **_summary_ms(dec_s),
                           "note": "decode replays the sketch live and checks every decision"},
        "length_by_op_kind": {k: {"sentences": len(v), "mean_tokens": round(statistics.fmean(a for a, _ in v), 1),
                                  "max_tokens": max(a for a, _ in v),
                                  "mean_decision_tokens": round(statistics.fmean(b for _, b in v), 1),
                                  "max_decision_tokens": max(b for _, b in v)} for k, v in sorted(lengths.items())},
        "plain_library_path": {
            "apply_trace_per_candidate": _summary_ms(plain_apply),
            "apply_trace_plus_postprocs_per_candidate": _summary_ms(plain_full),
            "note": "what check-and-drop generation pays per candidate (and per step if it re-applied the prefix)",
        },
        "constrained_walks_cold": cold,
        "constrained_walks_warm": warm,
        "target_ms_per_step": 1.0,
    }
    return result


def cuda_validity(models: list[str], walks: int, seed: int) -> dict:
    """Constrained CUDA sentences vs MetaSchedule's own sampling: how many are valid programs."""
    from collectors.hardware import cuda_hardware_of
    from collectors.tasks import extract_tasks
    from tvm.s_tir.schedule import Schedule, Trace

    import tlm.language.sentences as L
    from tlm.language import InvalidProgram, apply_sentence
    from collectors.sketches import refusing_postproc
    from tlm.language.space import build_space

    hw = cuda_hardware_of("NVIDIA H200", "9.0", 132)
    rng = random.Random(seed)
    ms_ok = ms_n = ours_ok = ours_n = dead = n_sketches = n_tasks = 0
    refused: dict[str, int] = defaultdict(int)
    steps: list[float] = []
    groups = [extract_tasks(m, hw, small=True) for m in models] + [fp16_matmuls()]
    for tasks in groups:
        for task in tasks:
            n_tasks += 1
            space = build_space(task, hw)
            live = L.live_sketches(space)
            n_sketches += len(space.sketches)
            dead += len(space.sketches) - len(live)
            for sk in live:
                for _ in range(walks):  # the plain library path: MetaSchedule samples decisions
                    sch = Schedule(task.mod, seed=rng.randint(1, 10**6))
                    Trace(sk.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
                    why = refusing_postproc(sch, task, hw)
                    ms_n += 1
                    ms_ok += why is None
                    if why is not None:
                        refused[why] += 1
                for _ in range(walks):  # ours: a walk through the legal words
                    words = L.prompt_tokens(space, sk)
                    while words[-1] != L.EOS:
                        t = time.perf_counter()
                        legal = L.legal_next_tokens(words, task, hw)
                        steps.append(time.perf_counter() - t)
                        words.append(rng.choice(sorted(legal)))
                    ours_n += 1
                    try:
                        apply_sentence(words, task, hw)
                        ours_ok += 1
                    except InvalidProgram as exc:
                        logger.error("invalid constrained CUDA sentence for %s sketch %d: %s",
                                     task.task_name, sk.sketch_id, exc)
    return {
        "hardware_key": hw.key, "models": models + ["fp16 matmuls (tensor cores)"], "tasks": n_tasks,
        "sketches": n_sketches,
        "sketches_without_valid_programs": dead,
        "metaschedule_samples": {"n": ms_n, "valid": ms_ok, "valid_share": round(ms_ok / max(ms_n, 1), 4),
                                 "refused_by": dict(refused)},
        "constrained_sentences": {"n": ours_n, "valid": ours_ok, "valid_share": round(ours_ok / max(ours_n, 1), 4)},
        "legal_words_per_step": _summary_ms(steps),
    }


def fp16_matmuls(shapes: tuple = ((256, 256, 256), (128, 512, 64), (1024, 1024, 1024))) -> list:
    """fp16 matmul tasks: on sm_90 their sketches use tensor cores (wmma, shared.dyn)."""
    import tvm
    from tvm import te

    from collectors.tasks import Task
    from collectors.tir import workload_key

    out = []
    for m, n, k in shapes:
        a = te.placeholder((m, k), name="A", dtype="float16")
        b = te.placeholder((k, n), name="B", dtype="float16")
        r = te.reduce_axis((0, k), name="k")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
        mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
        out.append(Task(workload_key=workload_key(mod), task_name=f"matmul_f16_{m}x{n}x{k}", mod=mod, op_kind="matmul"))
    return out


def model_step_ms(configs: dict[str, dict], vocab: int, context: int, reps: int = 30) -> dict:
    """Milliseconds of one incremental GPT-2 decoding step (KV cache, batch 1, random weights)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out = {}
    for name, cfg in configs.items():
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=context + reps + 1, **cfg)).eval()
        ids = torch.randint(0, vocab, (1, context))
        times = []
        with torch.no_grad():
            past = model(ids, use_cache=True).past_key_values
            nxt = ids[:, -1:]
            for _ in range(reps):
                t = time.perf_counter()
                res = model(nxt, past_key_values=past, use_cache=True)
                times.append(time.perf_counter() - t)
                past, nxt = res.past_key_values, res.logits[:, -1:].argmax(-1)
        out[name] = {"config": cfg, **_summary_ms(times[3:])}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-kind", type=int, default=2, help="tasks per op kind")
    p.add_argument("--walks", type=int, default=3, help="random legal walks per sketch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cuda-models", default="resnet50,bert_base",
                   help="zoo models whose CUDA tasks are checked ('' to skip)")
    p.add_argument("--cuda-walks", type=int, default=2, help="samples and walks per CUDA sketch")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "language.json"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args.per_kind, args.walks, args.seed)
    from tlm.model.tokenizer import language_vocabulary

    vocab = len(language_vocabulary())
    result["model_step"] = model_step_ms(
        {"tiny": {"n_embd": 64, "n_layer": 2, "n_head": 2},
         "gpt2_small": {"n_embd": 768, "n_layer": 12, "n_head": 12}}, vocab=vocab, context=256)
    grammar = result["constrained_walks_warm"]["per_step"]["mean_ms"]
    result["grammar_share_of_step"] = {k: round(grammar / (grammar + v["mean_ms"]), 4)
                                       for k, v in result["model_step"].items()}
    if args.cuda_models:
        result["cuda_validity"] = cuda_validity(args.cuda_models.split(","), args.cuda_walks, args.seed)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in ("sentences", "encode", "decode_checked", "plain_library_path")}, indent=1))
    print(json.dumps({"cold": result["constrained_walks_cold"]["per_step"],
                      "warm": result["constrained_walks_warm"]["per_step"],
                      "cold_by_choice": result["constrained_walks_cold"]["per_step_by_choice"],
                      "model_step": result["model_step"], "grammar_share_of_step": result["grammar_share_of_step"],
                      "cuda_validity": result.get("cuda_validity")}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
