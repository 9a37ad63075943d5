"""How fast are a trained model's greedy schedules? The training job's quality hook.

After a fine-tune, for a sample of held-out tasks (workloads of the held-out models with
measured records on the model's hardware), the generator writes its greedy schedule, the
collectors' builder and runner measure it (correctness-checked, the corpus's evaluator
settings), and the metric is its latency over the corpus's best for that task: 1.0 means the
model found the best schedule the search had measured; below 1.0, better. Every measured
candidate can be appended to the corpus under ``tuner="tlm:<model id>"`` (the closed loop).
"""
from __future__ import annotations

import logging
import math
from typing import Callable

log = logging.getLogger(__name__)


def greedy_quality(corpus_root: str, hardware_key: str, held_out: tuple[str, ...], *, tasks: int = 8,
                   index_url: str | None = None, append: bool = False,
                   model_id: str | None = None) -> Callable[[str], dict]:
    """The ``evaluate(model_dir) -> metrics`` hook of :func:`cluster.train_job.run_training`
    (it touches no Ray: a model directory in, metrics out)."""

    def evaluate(model_dir: str) -> dict:
        import os

        from collectors.hardware import NotRunnableHere, check_runs_here, hardware_for_key
        from collectors.tasks import task_from_index
        from storage import Corpus
        from tlm.service.generator import generate, measure_candidates
        from tlm.model.network import load_model

        name = model_id or os.path.basename(os.path.normpath(model_dir))
        model, tok, _ = load_model(model_dir)
        with Corpus.open(corpus_root, index_url=index_url) as corpus:
            hw = hardware_for_key(hardware_key, corpus.hardware_info(hardware_key))
            try:
                check_runs_here(hw)
            except NotRunnableHere as exc:
                return {"greedy_quality": f"not measured: {exc}"}
            best = corpus.best_latencies(hardware_key)
            chosen = [w for w in corpus.workloads() if w["workload_key"] in best
                      and set(w.get("models") or {}) & set(held_out) and (w.get("flops") or 0) > 0]
            chosen.sort(key=lambda w: -(w.get("flops") or 0))
            ratios, rows = [], []
            for w in chosen[:tasks]:
                task = task_from_index(w)
                g = generate(task, hw, model, tok, k=1)
                rec = measure_candidates(task, hw, g, model_id=name, top=1)[0]
                row = {"task": task.task_name, "generate_s": round(g.generate_s, 3), "corpus_best_s": best[w["workload_key"]],
                       "greedy_s": rec.latency_s, "error": rec.error}
                if rec.latency_s:
                    row["ratio"] = rec.latency_s / best[w["workload_key"]]
                    ratios.append(row["ratio"])
                rows.append(row)
                log.info("greedy %s: %s", task.task_name, row)
                if append:
                    corpus.append([rec])
        return {"greedy_tasks": len(rows), "greedy_errors": sum(1 for r in rows if r["error"]),
                "greedy_vs_corpus_best_geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
                "greedy_per_task": rows}

    return evaluate
