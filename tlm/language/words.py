"""The fixed words of the tensor language: special tokens, group openers, location names.

Kept apart from ``tlm.language`` (sentences) and ``tlm.language.decisions`` (reading decisions) so both,
and the tokenizer, share one definition.
"""
from __future__ import annotations

BOS, EOS, PAD, UNK = "[BOS]", "[EOS]", "[PAD]", "[UNK]"
DECIDE = "decide"
#: Choice kind -> the word that opens its decision group.
GROUP_WORD = {"tile": "tile", "ptile": "ptile", "pick": "pick", "at": "at", "parallel": "parallel"}
LOCATION_WORDS = {-1: "root", -2: "inline"}
#: Prompt grammar versions a sentence may be written in (tlm.language.sentences; the decisions are the
#: same words in all), and the one a dataset is built in unless asked: the one the shipped models read.
LANGUAGE_VERSIONS = (1, 2)
DEFAULT_LANGUAGE = 1
#: The prompt words language version 2 adds (a model fine-tuned into it from a version-1 base gets them appended).
LAYOUT_WORDS = ("language", "regs", "lanes", "read", "write", "dim", "identity", "level")
#: ISA flags worth a word in the prompt (others are left out to keep prompts short).
ISA_WORDS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "neon", "sve", "sve2", "dotprod")


def word_order(w: str) -> tuple:
    """Sort key for showing words: numbers by value first, then other words alphabetically."""
    return (0, int(w)) if w.isdigit() else (1, w)
