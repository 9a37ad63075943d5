"""The proof that a sentence is a valid program *as written*.

:func:`apply_sentence` decodes a complete sentence, replays its trace and requires that it
gives back exactly the requested decisions (TVM repaired nothing) and that every postprocessor
of the target accepts the result. The generator proves every candidate this way; the words it
may write in the first place come from :func:`tlm.language.sentences.legal_next_tokens`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collectors.hardware import Hardware
from collectors.sketches import refusing_postproc
from collectors.tasks import Task
from tlm.language.decisions import requested_decisions
from tlm.language.sentences import read_decisions

class InvalidProgram(ValueError):
    """A sentence whose program TVM had to repair, or that a postprocessor rejected."""


@dataclass
class Program:
    """A decoded sentence applied to its task: the trace and the postprocessed schedule."""

    trace: Any  # tvm.s_tir.schedule.Trace (the sketch with the sentence's decisions)
    schedule: Any  # tvm.s_tir.schedule.Schedule after every postprocessor


def apply_sentence(sentence: Any, task: Task, hardware: Hardware) -> Program:
    """Decode, replay on a fresh schedule, check nothing was repaired, run every postprocessor.

    Raises :class:`LanguageError` for a sentence outside the language and
    :class:`InvalidProgram` when TVM changed a decision or a postprocessor failed.
    """
    state = read_decisions(sentence, task, hardware)
    trace = state.trace()
    sch = check_trace(trace, requested_decisions(state.sketch, state.values), task, hardware)
    return Program(trace=trace, schedule=sch)


def check_trace(trace: Any, want: dict[int, Any], task: Task, hardware: Hardware) -> Any:
    """Replay ``trace``, require TVM to keep every decision in ``want`` (instruction index ->
    decision), then run every postprocessor; returns the postprocessed Schedule."""
    from tvm.s_tir.schedule import Schedule

    sch = Schedule(task.mod)
    trace.apply_to_schedule(sch, remove_postproc=True)
    got = {}
    applied = sch.trace  # a new Trace object per access
    decisions = applied.decisions
    for i, inst in enumerate(applied.insts):
        if i in want:
            d = decisions[inst]
            got[i] = [int(x) for x in d] if hasattr(d, "__len__") else int(d)
    for i, w in want.items():
        if got.get(i) != (list(w) if isinstance(w, (list, tuple)) else w):
            raise InvalidProgram(f"instruction {i}: requested decision {w}, TVM applied {got.get(i)}")
    refused = refusing_postproc(sch, task, hardware)
    if refused is not None:
        raise InvalidProgram(f"postprocessor {refused} rejected the program")
    return sch
