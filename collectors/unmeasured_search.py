"""A search started from measured programs that spends its trials on programs not yet measured.

MetaSchedule's evolutionary search draws its first population's measured part from its
database, but remembers as measured only the programs it picked itself. Started from the model's
seeds (``tlm.service.seeded``) or a compile's measured pool (``tlm.service.whole_model``), it
picked some of those programs again for measurement: 4-5 of the 44 searched trials of a 64-trial
seeded search on the Rocket Lake's held-out matmuls and convolutions, each a trial spent on a
program whose timing was known (and that the corpus, which keeps a program once, then dropped).

:func:`unmeasured_only` wraps the search: a candidate whose trace is a known program is never
sent to the builder; the search is told the known timing instead, and its trial budget is
counted in measurements of new programs only.
"""
from __future__ import annotations

from typing import Any

#: searches in a row allowed to offer known programs only before the search counts as exhausted
MAX_KNOWN_ONLY_BATCHES = 5


def unmeasured_only(strategy: Any, known: list) -> Any:
    """MetaSchedule search ``strategy`` (a name such as ``"evolutionary"``, or a strategy object)
    that never measures a program of ``known`` (measured records, errors included) again; a
    ``PySearchStrategy`` to give a ``TuneContext``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    from collectors.tir import trace_json, trace_text

    timings = {r.trace_json: r for r in known}

    @derived_object
    class _UnmeasuredOnly(PySearchStrategy):
        def __init__(self, inner: Any) -> None:
            self.inner = inner if isinstance(inner, ms.search_strategy.SearchStrategy) \
                else ms.search_strategy.SearchStrategy.create(inner)
            self.max_trials = 0
            self.measured = 0  # measurements of new programs so far

        def _initialize_with_tune_context(self, context: Any) -> None:
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any,
                       database: Any = None, cost_model: Any = None) -> None:
            self.max_trials, self.measured = max_trials, 0
            # each known program is offered at most once (the search remembers its own picks),
            # so this many more trials leave it ``max_trials`` measurements of new programs
            self.inner.pre_tuning(max_trials + len(timings), num_trials_per_iter, design_spaces, database,
                                  cost_model)

        def post_tuning(self) -> None:
            self.inner.post_tuning()

        def generate_measure_candidates(self) -> Any:
            left = self.max_trials - self.measured
            if left <= 0:
                return None
            for _ in range(MAX_KNOWN_ONLY_BATCHES):
                cands = self.inner.generate_measure_candidates()
                if cands is None:
                    return None
                paired = [(c, timings.get(trace_text(trace_json(c.sch.trace)))) for c in cands]
                fresh = [c for c, r in paired if r is None]
                seen = [(c, r) for c, r in paired if r is not None]
                if seen:  # told, not measured: the search counts them as it counts its own
                    self.inner.notify_runner_results([c for c, _ in seen], [_known_result(r) for _, r in seen])
                if fresh:
                    return fresh[:left]
            return None

        def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
            self.measured += len(results)
            self.inner.notify_runner_results(measure_candidates, results)

        def clone(self) -> Any:
            return _UnmeasuredOnly(self.inner.clone())

    return _UnmeasuredOnly(strategy)


def _known_result(record: Any) -> Any:
    """A record's outcome as MetaSchedule's runner would have reported it."""
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    if record.latency_s is not None and record.run_secs:
        return RunnerResult(run_secs=[float(s) for s in record.run_secs], error_msg=None)
    return RunnerResult(run_secs=None, error_msg=record.error or "failed")
