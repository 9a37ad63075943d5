"""Constrained decoding for ``transformers``: a ``LogitsProcessor`` that leaves only the words
keeping a sentence a valid program.

The legal words come from the language (:func:`tlm.language.legal_next_tokens`, computed from
the live schedule); this is the adapter that turns them into a mask over the model's
vocabulary during ``model.generate``. It lives beside the generator, not in the language, so
the language stays free of torch and transformers.
"""
from __future__ import annotations

import weakref
from typing import Any, Sequence

from collectors.hardware import Hardware
from collectors.tasks import Task
from tlm.language import EOS, PAD, LanguageError, legal_next_tokens

_VOCABULARIES: "weakref.WeakKeyDictionary[Any, tuple[int, dict[str, int]]]" = weakref.WeakKeyDictionary()


def vocabulary(tokenizer: Any) -> dict[str, int]:
    """``tokenizer.get_vocab()``, kept per tokenizer until its size changes (words added): the
    tokenizer builds that dict anew on every call, ~0.4 ms, and the generator asks once per
    request. Read only."""
    size = len(tokenizer)
    kept = _VOCABULARIES.get(tokenizer)
    if kept is None or kept[0] != size:
        kept = _VOCABULARIES[tokenizer] = (size, tokenizer.get_vocab())
    return kept[1]


class LegalTokensProcessor:
    """A ``transformers.LogitsProcessor`` masking every word that would not keep a valid program.

    ``prompts[i]`` are the words of row ``i``'s prompt (kept as words, since a prompt word
    the vocabulary lacks is ``[UNK]`` in the ids); ``input_len`` is the padded prompt length
    in ids. Generated ids after it are mapped back to words and fed to
    :func:`legal_next_tokens`. Rows that have finished may only continue with ``[PAD]``.
    """

    def __init__(self, tokenizer: Any, task: Task, hardware: Hardware,
                 prompts: Sequence[Sequence[str]], input_len: int, healthy: bool = False) -> None:
        self.tokenizer, self.task, self.hardware, self.healthy = tokenizer, task, hardware, healthy
        self.prompts = [list(p) for p in prompts]
        self.input_len = input_len
        self.vocab = vocabulary(tokenizer)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        mask = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            new = self.tokenizer.convert_ids_to_tokens(input_ids[row, self.input_len:].tolist())
            if EOS in new:
                allowed = {PAD, EOS}
            else:
                allowed = legal_next_tokens(self.prompts[row] + new, self.task, self.hardware, healthy=self.healthy)
            mask[row, vocab_ids(allowed, self.vocab, len(self.prompts[row]) + len(new))] = 0.0
        return scores + mask


def vocab_ids(words: set[str], vocab: dict[str, int], position: int) -> list[int]:
    """The vocabulary ids of the legal ``words``, sorted (so a choice never depends on set order);
    :class:`LanguageError` at ``position`` when the vocabulary lacks one of them."""
    ids = sorted(vocab[w] for w in words if w in vocab)
    if len(ids) != len(words):
        raise LanguageError(position, f"legal words missing from the vocabulary: {sorted(w for w in words if w not in vocab)[:8]}")
    return ids


def make_logits_processor(tokenizer: Any, task: Task, hardware: Hardware,
                          prompts: Sequence[Sequence[str]], input_len: int, healthy: bool = False) -> Any:
    """:class:`LegalTokensProcessor` registered as a ``transformers.LogitsProcessor``."""
    from transformers import LogitsProcessor

    class _Processor(LegalTokensProcessor, LogitsProcessor):
        pass

    return _Processor(tokenizer, task, hardware, prompts, input_len, healthy)
