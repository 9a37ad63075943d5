"""The tokenizer: one id per word of the tensor language (a ``tokenizers`` WordLevel model).

The vocabulary is what the *language defines* (:func:`language_vocabulary`): special tokens,
structure words, every instruction kind, annotation keys, dtypes, op kinds and name words,
CPU/GPU architecture names, ISA flags and every number word of :mod:`tlm.language.numbers`. So a
tile factor no corpus held is still a token. Words seen in a corpus's prompts may be added
(``extra_words``), never removed.

Fallback for unknown words: a prompt word outside the vocabulary (a new op name, a CPU the
list lacks) becomes ``[UNK]``; encoding never fails. Decision words are always in the
vocabulary, because the language writes decisions only with its own words.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

from tlm.language.numbers import DIGITS, number_vocabulary
from tlm.language.space import INSTRUCTION_KINDS
from tlm.language.words import BOS, EOS, GROUP_WORD, ISA_WORDS, LAYOUT_WORDS, LOCATION_WORDS, PAD, UNK

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
STRUCTURE_WORDS = (
    "hw", "cpu", "cuda", "arch", "cores", "sms", "vector", "isa", "task", "name", "block", "iters",
    "S", "R", "O", "dtype", "sketch", "of", "decide", "n", "extent", "inner", "any", "part",
    "factor", "locations", "var", "max", "unknown", "main", "void",
    *GROUP_WORD.values(), *LOCATION_WORDS.values(),
)
ANNOTATION_WORDS = (
    "parallel", "vectorize", "unroll_explicit", "unroll_implicit", "tiling_structure",
    "cooperative_fetch", "thread_extent_low_inclusive", "thread_extent_high_inclusive",
    "random_compute_producer", "auto_tensorize", "auto_tensorize_init", "layout_rewrite_preproc",
    "adaptive_pool_avg", "adaptive_pool_max", "pool_avg", "pool_max", "software_pipeline_stage",
    "software_pipeline_order", "software_pipeline_async_stages", "pragma_auto_unroll_max_step",
    "pragma_unroll_explicit", "warp_execution",
)
DTYPE_WORDS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
OP_KIND_WORDS = ("conv2d", "conv1d", "conv3d", "matmul", "softmax", "norm", "pool", "reduction",
                 "gather", "layout", "elementwise")
#: Words of TVM/Relax op and block names (task names are split on "_", digits stripped).
NAME_WORDS = (
    "fused", "nn", "conv1d", "conv2d", "conv3d", "transpose", "matmul", "dense", "batch", "add",
    "subtract", "multiply", "divide", "floor", "mod", "power", "maximum", "minimum", "relu",
    "gelu", "tanh", "silu", "sigmoid", "exp", "log", "sqrt", "rsqrt", "erf", "clip", "softmax",
    "layer", "rms", "group", "norm", "mean", "sum", "max", "min", "variance", "pool1d",
    "pool2d", "pool3d", "avg", "adaptive", "global", "reshape", "squeeze", "expand", "dims",
    "concatenate", "concat", "split", "strided", "slice", "broadcast", "to", "take", "gather",
    "scatter", "where", "cast", "tir", "logical", "not", "and", "or", "equal", "not_equal",
    "less", "greater", "cumsum", "argmax", "argmin", "zeros", "ones", "full", "pad", "temp",
    "compute", "T", "NT", "TN", "NN", "TT", "nchw", "nhwc", "oihw", "hwio", "matmul_NT",
    "depthwise", "dilate", "data", "kernel", "bias", "embedding", "attention", "rotary", "C",
    "D", "A", "B", "Y", "Z", "conv2d_nchw", "red", "rsum", "rmax", "lv", "linear", "layout",
    "transform", "permute", "dims", "astype", "image", "resize", "mul", "sub", "div",
)
ARCH_WORDS = (
    "generic", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "core-avx2", "corei7",
    "nehalem", "westmere", "sandybridge", "ivybridge", "haswell", "broadwell", "skylake",
    "skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
    "icelake-server", "tigerlake", "rocketlake", "alderlake", "raptorlake", "meteorlake",
    "arrowlake", "lunarlake", "sapphirerapids", "emeraldrapids", "graniterapids", "sierraforest",
    "knl", "knm", "znver1", "znver2", "znver3", "znver4", "znver5", "btver2", "bdver4",
    "cortex-a53", "cortex-a55", "cortex-a72", "cortex-a76", "cortex-a78", "neoverse-n1",
    "neoverse-n2", "neoverse-v1", "neoverse-v2", "apple-m1", "apple-m2", "apple-m3", "apple-m4",
    *(f"sm_{v}" for v in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120)),
    "sm_90a", "sm_100a", "sm_120a",
)


def language_vocabulary(extra_words: Iterable[str] = ()) -> list[str]:
    """Every word the language defines, special tokens first; then ``extra_words`` (sorted)."""
    words: list[str] = []
    seen: set[str] = set()
    groups = (SPECIAL_TOKENS, STRUCTURE_WORDS, INSTRUCTION_KINDS, ANNOTATION_WORDS, DTYPE_WORDS,
              OP_KIND_WORDS, NAME_WORDS, ARCH_WORDS, ISA_WORDS, number_vocabulary(), DIGITS, LAYOUT_WORDS)
    for group in groups:
        for w in group:
            if w not in seen:
                seen.add(w)
                words.append(w)
    for w in sorted(set(extra_words) - seen):
        if w and not any(ch.isspace() for ch in w):
            words.append(w)
    return words


def build_tokenizer(extra_words: Iterable[str] = (), *, model_max_length: int = 2048) -> Any:
    """A ``PreTrainedTokenizerFast`` over the language's vocabulary (WordLevel, split on spaces).

    Sentences already carry ``[BOS]``/``[EOS]``, so no template adds them; unknown words
    become ``[UNK]``. ``model_max_length`` bounds a sentence in tokens.
    """
    vocab = {w: i for i, w in enumerate(language_vocabulary(extra_words))}
    fast = _fast(vocab, model_max_length)
    logger.debug("tokenizer with %d words", len(vocab))
    return fast


def _fast(vocab: dict[str, int], model_max_length: int) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        model_max_length=model_max_length, padding_side="left",
    )
    return fast


def extend_tokenizer(tokenizer: Any, words: Iterable[str]) -> Any:
    """``tokenizer`` with ``words`` it lacks appended (ids after its own, in the given order), so a
    model's embedding rows for its words keep their meaning: how a base model trained in an older
    language version learns the words of a newer one. The same tokenizer when it lacks none."""
    vocab = dict(tokenizer.get_vocab())
    new = [w for w in dict.fromkeys(words) if w not in vocab]
    if not new:
        return tokenizer
    nxt = max(vocab.values()) + 1
    for i, w in enumerate(new):
        vocab[w] = nxt + i
    return _fast(vocab, tokenizer.model_max_length)


def load_tokenizer(path: str) -> Any:
    """A tokenizer saved with ``save_pretrained``."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)


def unknown_words(words: Iterable[str], tokenizer: Any) -> list[str]:
    """The words of a sentence that the tokenizer maps to ``[UNK]`` (for coverage reports)."""
    vocab = tokenizer.get_vocab()
    return [w for w in words if w not in vocab]
