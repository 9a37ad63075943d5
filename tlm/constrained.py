"""Constrained decoding: only words that keep a sentence a valid program, and the proof.

:func:`tlm.language.legal_next_tokens` computes the legal words from the live schedule;
this module turns them into a ``transformers.LogitsProcessor`` and provides
:func:`apply_sentence`, the check that a complete sentence is a valid program *as written*:
replaying its trace gives back exactly the requested decisions (TVM repaired nothing) and
every postprocessor of the target accepts the result.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from collectors.hardware import Hardware
from collectors.sketches import refusing_postproc
from collectors.tasks import Task
from tlm.language import EOS, PAD, LanguageError, legal_next_tokens, read_decisions, requested_decisions

logger = logging.getLogger(__name__)


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
    for i, inst in enumerate(sch.trace.insts):
        if i in want:
            d = sch.trace.decisions[inst]
            got[i] = [int(x) for x in d] if hasattr(d, "__len__") else int(d)
    for i, w in want.items():
        if got.get(i) != (list(w) if isinstance(w, (list, tuple)) else w):
            raise InvalidProgram(f"instruction {i}: requested decision {w}, TVM applied {got.get(i)}")
    refused = refusing_postproc(sch, task, hardware)
    if refused is not None:
        raise InvalidProgram(f"postprocessor {refused} rejected the program")
    return sch


class LegalTokensProcessor:
    """A ``transformers.LogitsProcessor`` masking every word that would not keep a valid program.

    ``prompts[i]`` are the words of row ``i``'s prompt (kept as words, since a prompt word
    the vocabulary lacks is ``[UNK]`` in the ids); ``input_len`` is the padded prompt length
    in ids. Generated ids after it are mapped back to words and fed to
    :func:`legal_next_tokens`. Rows that have finished may only continue with ``[PAD]``.
    """

    def __init__(self, tokenizer: Any, task: Task, hardware: Hardware,
                 prompts: Sequence[Sequence[str]], input_len: int) -> None:
        self.tokenizer, self.task, self.hardware = tokenizer, task, hardware
        self.prompts = [list(p) for p in prompts]
        self.input_len = input_len
        self.vocab = tokenizer.get_vocab()

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        mask = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            new = self.tokenizer.convert_ids_to_tokens(input_ids[row, self.input_len:].tolist())
            if EOS in new:
                allowed = {PAD, EOS}
            else:
                allowed = legal_next_tokens(self.prompts[row] + new, self.task, self.hardware)
            ids = [self.vocab[w] for w in allowed if w in self.vocab]
            if len(ids) != len(allowed):
                missing = sorted(w for w in allowed if w not in self.vocab)
                raise LanguageError(len(self.prompts[row]) + len(new),
                                    f"legal words missing from the vocabulary: {missing[:8]}")
            mask[row, ids] = 0.0
        return scores + mask


def make_logits_processor(tokenizer: Any, task: Task, hardware: Hardware,
                          prompts: Sequence[Sequence[str]], input_len: int) -> Any:
    """:class:`LegalTokensProcessor` registered as a ``transformers.LogitsProcessor``."""
    from transformers import LogitsProcessor

    class _Processor(LegalTokensProcessor, LogitsProcessor):
        pass

    return _Processor(tokenizer, task, hardware, prompts, input_len)
