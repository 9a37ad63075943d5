"""The tensor language: a schedule as a sentence a model can learn, and the proof that a sentence
is a valid program. TVM only: nothing here imports torch or transformers.

The public API, in the order data flows through it (each name lives in one module below):

* :mod:`.space`         - every sketch of a (task, hardware) and the choices it leaves open
* :mod:`.numbers`       - how integers are written (words up to 1024, spelled digits above)
* :mod:`.words`         - the language's fixed words (group words, locations, ISA flags)
* :mod:`.decisions`     - the live domain of each choice, given the decisions before it
* :mod:`.replay`        - incremental replay of a sketch, pausing at each choice
* :mod:`.gpu`, :mod:`.shared_memory`, :mod:`.trace_flow` - CUDA limits that keep every sentence
  within VerifyGPUCode (threads, vthreads, shared memory, pipelining)
* :mod:`.prompt`        - the prompt of a (task, hardware, sketch) in each language version
* :mod:`.sentences`     - the grammar; ``encode``/``decode`` between traces and sentences;
  ``legal_next_tokens``
* :mod:`.program`       - ``apply_sentence``: replay, nothing repaired, every postprocessor accepts
"""
from tlm.language.decisions import (
    LIVENESS_WALKS, DecisionState, build_trace, first_live, is_live, live_sketches, requested_decisions, tile_factor_values)
from tlm.language.errors import LanguageError
from tlm.language.numbers import divisors, number_tokens
from tlm.language.program import InvalidProgram, Program, apply_sentence, check_trace
from tlm.language.prompt import hardware_tokens, prompt_tokens, sentence_language, sketch_tokens, task_tokens
from tlm.language.sentences import (
    Sentence, decode, encode, legal_next_tokens, match_prompt, read_decisions, split_words)
from tlm.language.space import INSTRUCTION_KINDS, Choice, Sketch, Space, build_space
from tlm.language.words import (
    BOS, DECIDE, DEFAULT_LANGUAGE, EOS, GROUP_WORD, ISA_WORDS, LANGUAGE_VERSIONS, LOCATION_WORDS, PAD, UNK, word_order)

__all__ = [
    "LIVENESS_WALKS", "DecisionState", "build_trace", "first_live", "is_live", "live_sketches", "requested_decisions",
    "tile_factor_values",
    "LanguageError", "divisors", "number_tokens", "InvalidProgram", "Program", "apply_sentence", "check_trace",
    "DEFAULT_LANGUAGE", "LANGUAGE_VERSIONS", "sentence_language", "Sentence", "decode", "encode", "hardware_tokens", "legal_next_tokens", "match_prompt", "prompt_tokens",
    "read_decisions", "sketch_tokens", "split_words", "task_tokens", "INSTRUCTION_KINDS", "Choice", "Sketch",
    "Space", "build_space", "BOS", "DECIDE", "EOS", "GROUP_WORD", "ISA_WORDS", "LOCATION_WORDS", "PAD", "UNK",
    "word_order",
]
