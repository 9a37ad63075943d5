"""The tensor language: a MetaSchedule trace as a sentence of readable words, and back.

Grammar (words separated by single spaces; ``NUM`` is a number as in :mod:`tlm.language.numbers`:
``0``..``1024`` as one word, larger values as ``num<k>`` plus ``k`` digit words)::

    sentence  := "[BOS]" prompt decisions "[EOS]"
    prompt    := ["language" NUM] hardware task sketch "decide"  -- "language 2" opens a version-2 prompt
    hardware  := "hw" ("cpu" | "cuda") "arch" ARCH ("cores" | "sms") NUM "vector" NUM ["isa" FLAG+]
                 ["regs" NUM]                                 -- v2, CPU: architectural vector registers
    task      := "task" OPKIND "name" WORD+ block+
    block     := "block" WORD+ "iters" (("S" | "R" | "O") NUM)* "dtype" DTYPE ["lanes" NUM] access*
                                                              -- v2: lanes where the dtype changes
    access    := ("read" | "write") (("dim" NUM*)+ | "identity")  -- v2: per buffer dimension, in order,
                                                              -- the block iterators (by position) indexing
                                                              -- it; "identity": dimension d by iterator d
    sketch    := "sketch" NUM "of" NUM step+
    step      := KIND                                         -- any other instruction
               | ("ReverseComputeAt" | "ComputeAt") "level" (NUM | "var")  -- v2: after which tile level
               | "Annotate" ANNKEY                            -- ANNKEY without "meta_schedule."
               | "Annotate" "parallel" "max" NUM              -- MutateParallel's choice (below)
               | "SamplePerfectTile" "n" NUM "extent" EXT "inner" (NUM | "any")
               | "SamplePartitionedTile" "n" NUM "extent" EXT "part" NUM "factor" NUM
               | "SampleCategorical" "n" NUM NUM+             -- count, then the candidate values
               | "SampleComputeLocation" "locations" (NUM | "var")
    EXT       := NUM | "var"                                  -- "var": depends on earlier decisions
    decisions := group*                                       -- one per choice, in trace order
    group     := "tile" NUM{n}      -- SamplePerfectTile: the n factors, outermost first
               | "ptile" NUM{n}     -- SamplePartitionedTile: the n factors
               | "pick" NUM         -- SampleCategorical: the chosen candidate's value (equal
                                    -- candidates are one program; the first index is decoded)
               | "at" ("root" | "inline" | NUM)   -- SampleComputeLocation: -1, -2 or loop index
               | "parallel" NUM     -- value of the meta_schedule.parallel annotation

The prompt is fixed by (task, hardware, sketch, language version); everything after ``decide`` is
what a model generates. Version 1 (the shipped models') says which iterators a block has; version 2
(:data:`LANGUAGE_VERSIONS`) also says which iterators index each dimension of each buffer a block
reads and writes, in order, so the contiguous (last) dimension is visible and an NN matmul reads
differently from an NT one; how many vector lanes the block's dtype has and how many vector registers
the CPU has; and, for every sketch that moves a consumer or a cache write under the tiles, after
which tile level it sits (``level 1``: under the outer tiles, ``level 2``: under the inner ones),
words that mean the same in every family, where version 1 tells such sketches apart by their id
alone. The decisions are the same words in both versions; a sentence says its version by its first
words, so :func:`decode` and :func:`legal_next_tokens` read either. The ``parallel`` group exists because MetaSchedule's MutateParallel rewrites the
annotation's *value* (an instruction input, not a decision), so a measured trace can differ
from its sketch there; writing it as a choice keeps the round trip exact.

Worked example: C = A(64x128) @ B(128x96) then ReLU, on a 2-core Zen 4, sketch 0 of 3. This
is the complete sentence, as ``encode`` writes it (line breaks added)::

    [BOS] hw cpu arch znver4 cores 2 vector 512 isa sse4_2 avx avx2 fma avx512f avx512bw
    avx512vl avx512_vnni avx512_bf16 task matmul name fused matmul relu
    block C iters S 64 S 96 R 128 dtype float32 block D iters S 64 S 96 dtype float32
    sketch 0 of 3 GetSBlock GetSBlock GetSBlock Annotate tiling_structure GetLoops
    SamplePerfectTile n 4 extent 64 inner 64 Split SamplePerfectTile n 4 extent 96 inner 64
    Split SamplePerfectTile n 2 extent 128 inner 64 Split Reorder GetConsumers
    Annotate parallel max 32 Annotate vectorize SampleCategorical n 4 0 16 64 512
    Annotate unroll_explicit decide
    tile 2 4 1 8 tile 1 6 4 4 tile 16 8 parallel 32 pick 512 [EOS]

It reads: split i (64) into 2x4x1x8, j (96) into 1x6x4x4, k (128) into 16x8; parallelise up
to 32 iterations; unroll up to 512 steps. ``decode`` gives back the sketch's trace with
these decisions.

Unknown prompt words (an op name or CPU the vocabulary lacks) stay words in the sentence;
the tokenizer maps them to ``[UNK]`` (see :mod:`tlm.model.tokenizer`). Decisions only ever use
words of the language, so a generated decision part is always fully in the vocabulary.
"""
from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from collectors.hardware import Hardware
from collectors.tasks import Task
from tlm.language.decisions import DecisionState, is_live, live_sketches
from tlm.language.errors import LanguageError
from tlm.language.numbers import number_tokens
from tlm.language.space import INSTRUCTION_KINDS, Choice, Sketch, Space, build_space
from tlm.language.prompt import prompt_head, prompt_languages, prompt_tokens, sentence_language
from tlm.language.words import DEFAULT_LANGUAGE, EOS, GROUP_WORD, LANGUAGE_VERSIONS, LOCATION_WORDS, word_order

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Sentence:
    """A sentence: the prompt (ends with ``decide``) followed by decision groups and ``[EOS]``."""

    tokens: tuple[str, ...]  # every word, [BOS] .. [EOS]
    prompt_len: int  # tokens[:prompt_len] is the prompt
    sketch_id: int  # which sketch of the task's design space the prompt describes

    @property
    def prompt(self) -> tuple[str, ...]:
        return self.tokens[: self.prompt_len]

    @property
    def decisions(self) -> tuple[str, ...]:
        return self.tokens[self.prompt_len :]

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    def __str__(self) -> str:
        return self.text


# ------------------------------------------------------------------------------------------
# encode
# ------------------------------------------------------------------------------------------
def encode(task: Task, hardware: Hardware, trace: Any, *, language: int = DEFAULT_LANGUAGE) -> Sentence:
    """The sentence of ``trace`` (a Trace, trace JSON text, or ``[insts, decisions]``), its prompt in
    grammar version ``language``.

    Raises :class:`LanguageError` when the trace is not in the task's design space (another
    workload's trace, an unknown instruction), naming the first instruction that differs.
    """
    from collectors.sketches import skeleton

    space = build_space(task, hardware)
    as_json = _trace_json(trace)
    insts = as_json[0]
    for i, inst in enumerate(insts):
        if inst[0] == "EnterPostproc":
            break
        if inst[0] not in INSTRUCTION_KINDS:
            raise LanguageError(i, f"unknown instruction kind {inst[0]!r}")
    key = skeleton(as_json)
    sketch, positions = None, None
    for sk in space.sketches:
        if sk.skeleton == key:
            sketch, positions = sk, [c.inst_index for c in sk.choices]
            break
        if sk.simple_skeleton == key and sk.simple_choice_index:
            sketch, positions = sk, list(sk.simple_choice_index)
            break
    if sketch is None:
        pos, why = _first_difference(key, space.sketches)
        raise LanguageError(pos, f"trace is not in the design space of task {task.task_name!r} "
                                 f"({task.workload_key}) on {hardware.key}: {why}")
    decisions = {int(i): v for i, v in as_json[1]}
    tokens = prompt_tokens(space, sketch, language)
    prompt_len = len(tokens)
    for choice, pos in zip(sketch.choices, positions):
        tokens.append(GROUP_WORD[choice.kind])
        try:
            tokens += _value_tokens(choice, pos, decisions, insts)
        except (KeyError, ValueError, IndexError, TypeError) as exc:
            raise LanguageError(pos, f"{choice.kind} choice: {exc}") from None
    tokens.append(EOS)
    return Sentence(tuple(tokens), prompt_len, sketch.sketch_id)


def _value_tokens(choice: Choice, pos: int, decisions: dict, insts: list) -> list[str]:
    if choice.kind == "parallel":
        return number_tokens(int(insts[pos][1][1]))
    if pos not in decisions:
        raise KeyError(f"sampling instruction {pos} has no decision")
    value = decisions[pos]
    if choice.kind in ("tile", "ptile"):
        if len(value) != choice.n:
            raise ValueError(f"{len(value)} factors, the sketch samples {choice.n}")
        return [t for f in value for t in number_tokens(int(f))]
    if choice.kind == "pick":
        return number_tokens(choice.candidates[int(value)])
    v = int(value)
    return [LOCATION_WORDS[v]] if v in LOCATION_WORDS else number_tokens(v)


def _trace_json(trace: Any) -> list:
    if isinstance(trace, str):
        return json.loads(trace)
    if isinstance(trace, (list, tuple)):
        return list(trace)
    from collectors.tir import trace_json

    return trace_json(trace)


def _first_difference(key: tuple, sketches: Sequence[Sketch]) -> tuple[int, str]:
    best_pos, best_why = 0, "the design space is empty"
    for sk in sketches:
        for ref in (sk.skeleton, sk.simple_skeleton):
            n = next((i for i, (a, b) in enumerate(zip(key, ref)) if a != b), min(len(key), len(ref)))
            if n >= best_pos:
                got = json.loads(key[n])[0] if n < len(key) else "end of trace"
                want = json.loads(ref[n])[0] if n < len(ref) else "end of trace"
                best_pos = n
                best_why = (f"instruction {n} is {got} where the closest sketch "
                            f"({sk.sketch_id}) has {want}") if got != want else (
                            f"instruction {n} ({got}) has other inputs or attributes than in sketch {sk.sketch_id}")
    return best_pos, best_why


# ------------------------------------------------------------------------------------------
# constrained decisions
# ------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------
# decode and legal words
# ------------------------------------------------------------------------------------------
def split_words(sentence: Sentence | str | Sequence[str]) -> list[str]:
    if isinstance(sentence, Sentence):
        return list(sentence.tokens)
    if isinstance(sentence, str):
        return sentence.split()
    return list(sentence)


def match_prompt(space: Space, words: Sequence[str]) -> tuple[Sketch, int]:
    """The sketch whose prompt (in the version the words say, :func:`sentence_language`) starts
    ``words``; raises naming the first word that differs."""
    language = sentence_language(words)
    if language not in LANGUAGE_VERSIONS:
        raise LanguageError(2, f"unknown language version {language}; known: {', '.join(map(str, LANGUAGE_VERSIONS))}")
    for sk in space.sketches:  # the sketch's head first: a whole prompt reads the sketch's facts
        if _may_open(space, sk, language, words):
            p = prompt_tokens(space, sk, language)
            if len(words) >= len(p) and list(words[: len(p)]) == p:
                return sk, len(p)
    best = (-1, None)
    for sk in space.sketches:  # no match: the closest prompt, for the error
        p = prompt_tokens(space, sk, language)
        n = next((i for i, (a, b) in enumerate(zip(words, p)) if a != b), min(len(words), len(p)))
        if n > best[0]:
            best = (n, p)
    n, p = best
    if p is None:
        raise LanguageError(0, "the task has no sketches")
    got = words[n] if n < len(words) else "the end of the sentence"
    want = p[n] if n < len(p) else "the end"
    raise LanguageError(n, f"prompt does not match any sketch of this task/hardware: found {got!r}, "
                           f"the closest prompt (sketch {_sketch_of(space, p, language)}) has {want!r}")


def _may_open(space: Space, sketch: Sketch, language: int, words: Sequence[str]) -> bool:
    """Whether ``words`` and ``sketch``'s prompt agree as far as both reach its head (:func:`prompt_head`)."""
    head = prompt_head(space, sketch, language)
    n = min(len(words), len(head))
    return list(words[:n]) == head[:n]


def _sketch_of(space: Space, prompt: list[str], language: int) -> int:
    for sk in space.sketches:
        if prompt_tokens(space, sk, language) == prompt:
            return sk.sketch_id
    return -1


def read_decisions(sentence: Sentence | str | Sequence[str], task: Task, hardware: Hardware) -> DecisionState:
    """Read a complete sentence with the live replay; returns its finished DecisionState."""
    words = split_words(sentence)
    space = build_space(task, hardware)
    sketch, plen = match_prompt(space, words)
    state = DecisionState(space, sketch, plen)
    try:
        for w in words[plen:]:
            if state.ended:
                raise LanguageError(state.position, f"word {w!r} after [EOS]")
            state.feed(w)
        if not state.ended:
            legal = " ".join(sorted(state.legal(), key=word_order)[:12])
            raise LanguageError(state.position, f"the sentence ends before its decisions are complete; "
                                                f"expected one of: {legal}")
    finally:
        state.close()
    return state


def decode(sentence: Sentence | str | Sequence[str], task: Task, hardware: Hardware) -> Any:
    """The trace a sentence stands for (the sketch's instructions with its decisions).

    Every decision is checked against the live schedule while replaying, so an illegal one
    raises :class:`LanguageError` naming its word position and the legal words there.
    """
    return read_decisions(sentence, task, hardware).trace()


class _StateCache:
    """Live DecisionStates keyed by the words read so far, so walking a sentence one word
    at a time advances one state instead of replaying from the start (LRU, bounded)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._states: OrderedDict[tuple, DecisionState] = OrderedDict()

    def get(self, space: Space, words: Sequence[str], healthy: bool = False) -> DecisionState:
        key = (space.uid, healthy, tuple(words))
        st = self._states.get(key)
        if st is not None:
            self._states.move_to_end(key)
            return st
        prev_key = (space.uid, healthy, tuple(words[:-1]))
        st = self._states.pop(prev_key, None)
        if st is not None:
            st.feed(words[-1])
        else:
            sketch, plen = match_prompt(space, words)
            if not is_live(space, sketch):  # decides this sketch's life only
                live = live_sketches(space)
                if not live:
                    raise _nothing_lives(space)
                raise LanguageError(plen - 1, f"sketch {sketch.sketch_id} gives no valid program ({sketch.dead}); "
                                              f"generate with one of {[s.sketch_id for s in live]}")
            st = DecisionState(space, sketch, plen, healthy=healthy)
            for w in words[plen:]:
                st.feed(w)
        self._states[key] = st
        while len(self._states) > self.size:
            _, old = self._states.popitem(last=False)
            old.close()
        return st


_STATES = _StateCache()
_STATES_LOCK = threading.Lock()


def _nothing_lives(space: Space) -> LanguageError:
    return LanguageError(0, f"no sketch of {space.task.task_name} on {space.hardware.key} gives a valid program: "
                            + "; ".join(f"sketch {sk.sketch_id}: {sk.dead}" for sk in space.sketches))


def legal_next_tokens(partial: Sentence | str | Sequence[str], task: Task, hardware: Hardware, *,
                      healthy: bool = False) -> set[str]:
    """Exactly the words that may follow ``partial`` and keep it a valid program.

    Inside the prompt: the next word of any live sketch's prompt that ``partial`` starts (so
    the sketch itself may be chosen; a dead sketch, see ``tlm.language.space.Sketch.dead``, raises
    :class:`LanguageError` once its prompt is complete); after ``decide``: the live domain of the current choice;
    after the last decision: ``[EOS]``; after ``[EOS]``: nothing. ``healthy`` (writing only):
    tile factors are further kept out of the CPU's static failure modes (``tlm.language.health``).
    """
    words = split_words(partial)
    space = build_space(task, hardware)
    # only the sketches whose prompt ``words`` is inside (or, past a prompt, the one it matched) are
    # checked for life: a check replays the sketch and runs every postprocessor (~2 ms each), and a
    # greedy answer of one writes a single sketch (tlm.service.generator.GREEDY_SKETCHES)
    extending: dict[int, tuple[Sketch, set[str]]] = {}
    for sk in space.sketches:
        for language in prompt_languages(words):
            if language not in LANGUAGE_VERSIONS or not _may_open(space, sk, language, words):
                continue
            p = prompt_tokens(space, sk, language)
            if len(words) < len(p) and list(words) == p[: len(words)]:
                extending.setdefault(sk.sketch_id, (sk, set()))[1].add(p[len(words)])
    nxt = {w for sk, ws in extending.values() if is_live(space, sk) for w in ws}
    if nxt:
        return nxt
    if extending and not live_sketches(space):
        raise _nothing_lives(space)
    with _STATES_LOCK:  # states are not thread-safe; one request at a time walks them
        return set(_STATES.get(space, words, healthy).legal())
