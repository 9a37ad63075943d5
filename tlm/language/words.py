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
#: ISA flags worth a word in the prompt (others are left out to keep prompts short).
ISA_WORDS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "neon", "sve", "sve2", "dotprod")


def word_order(w: str) -> tuple:
    """Sort key for showing words: numbers by value first, then other words alphabetically."""
    return (0, int(w)) if w.isdigit() else (1, w)
