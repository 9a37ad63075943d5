"""Hostile sentences (issue 22): whatever words arrive — a valid schedule's sentence cut, shuffled,
with words dropped, repeated or replaced by other vocabulary words or by junk — the decoder either
returns a program TVM accepts, or raises ``LanguageError`` / ``InvalidProgram`` saying why. No
other exception, no hang. Property-based (hypothesis) on three task kinds."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.language import random_walk
from tlm.language import EOS, LanguageError, apply_sentence
from tlm.language.program import InvalidProgram
from tlm.model.tokenizer import build_tokenizer

VOCAB = sorted(build_tokenizer().get_vocab())


def _mutate(data, words: list[str]) -> list[str]:
    words = list(words)
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["cut", "drop", "repeat", "swap", "vocab", "junk"]))
        i = data.draw(st.integers(0, len(words) - 1))
        if how == "cut":
            words = words[: i + 1]
        elif how == "drop" and len(words) > 1:
            del words[i]
        elif how == "repeat":
            words.insert(i, words[i])
        elif how == "swap":
            j = data.draw(st.integers(0, len(words) - 1))
            words[i], words[j] = words[j], words[i]
        elif how == "vocab":
            words[i] = data.draw(st.sampled_from(VOCAB))
        else:
            words[i] = data.draw(st.text(min_size=0, max_size=12))
    return words


@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d"])
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_mutated_sentence_is_a_program_or_a_language_error(tasks, cpu_hw, name, data):
    task = tasks[name]
    words = _mutate(data, random_walk(data, task, cpu_hw))
    try:
        program = apply_sentence(words if data.draw(st.booleans()) else " ".join(words), task, cpu_hw)
    except (LanguageError, InvalidProgram) as exc:
        assert str(exc)
    else:
        assert words[-1] == EOS and program.schedule is not None
