"""The model as a collection strategy: the ``tune`` functions of ``tlm collect --strategy tlm``
(the closed loop: the model's own candidates measured) and ``--strategy tlm-pool`` (every program
of a served ranked request's pool measured). The model-seeded search is :mod:`tlm.service.seeded`."""
from __future__ import annotations

from typing import Any, Callable

from collectors.hardware import Hardware
from collectors.tasks import Task
from tlm.service.generator import MAX_K, generate, ranked_pool, tuner_name


def pool_tuner_name(model_id: str) -> str:
    """The ``tuner`` column of a record of the model's measured ranked pool: ``tlm-pool:<model id>``."""
    return f"tlm-pool:{model_id}"


def pool_tuner(model: Any, tokenizer: Any, model_id: str, ranker: Any) -> Callable[..., Any]:
    """A ``tune`` function for ``collectors.collect.collect`` that measures every program of the
    pool a served ranked request picks from (:func:`ranked_pool`: the greedy programs,
    ``config.trials`` samples, the rules' program), under ``tlm-pool:<model id>``: what the ranker
    of this model's pools learns from (``tlm cost-model fit --tuners tlm-pool:``). The cost model
    fitted on the key's searches ranks those pools worse than the rules' program alone does
    (0.63x against 0.79x MetaSchedule@256 on 20 held-out Zen 3 tasks, whose fastest program was
    0.99x), having seen only the searches' programs; one fitted on 2,786 of these records ranked
    them no better (0.67x, :data:`RULES_FIRST`)."""

    def tune(task: Task, hardware: Hardware, config: Any, *, on_records: Callable[[list], None] | None = None,
             run_id: str = "", progress: Callable[..., None] | None = None) -> Any:
        from collectors.tuner import measure_schedules

        g = ranked_pool(task, hardware, model, tokenizer, ranker, pool=min(config.trials, 4 * MAX_K))
        summary = measure_schedules(task, hardware, [c.schedule for c in g.candidates],
                                    tuner=pool_tuner_name(model_id), config=config, on_records=on_records,
                                    run_id=run_id)
        if progress is not None:
            progress(summary.records, len(g.candidates), summary.best_latency_s)
        return summary

    return tune


def model_tuner(model: Any, tokenizer: Any, model_id: str) -> Callable[..., Any]:
    """A ``tune`` function for ``collectors.collect.collect``: the closed loop.

    Each unit generates ``min(trials, MAX_K)`` candidates (beam search; greedy at 1 trial),
    measures all of them like a search's candidates and hands the records on, so collection,
    resume and run bookkeeping are the search's own; the next fine-tune learns from them.
    """

    def tune(task: Task, hardware: Hardware, config: Any, *, on_records: Callable[[list], None] | None = None,
             run_id: str = "", progress: Callable[..., None] | None = None) -> Any:
        from collectors.tuner import measure_schedules

        g = generate(task, hardware, model, tokenizer, k=min(config.trials, MAX_K))
        summary = measure_schedules(task, hardware, [c.schedule for c in g.candidates], tuner=tuner_name(model_id),
                                    config=config, on_records=on_records, run_id=run_id)
        if progress is not None:
            progress(summary.records, config.trials, summary.best_latency_s)
        return summary

    return tune
