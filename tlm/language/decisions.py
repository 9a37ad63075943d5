"""Reading the decision part of a sentence against the live schedule, and which sketches can start one.

:class:`DecisionState` reads decision words one at a time while :class:`tlm.language.replay.LiveReplay`
replays the sketch, so every legal set is computed from the live schedule (tile factors from
:func:`tile_factor_values`, further bounded on GPUs by :mod:`tlm.language.gpu`; compute locations as
TVM lists them). :func:`live_sketches` tells which sketches some decisions make valid.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Sequence

from tlm.language.errors import LanguageError
from tlm.language.health import healthy_factors, parallel_values, rules_of, tiling_of
from tlm.language.numbers import divisors, next_number_tokens
from tlm.language.space import Choice, Sketch, Space, take_own_replay
from tlm.language.words import EOS, GROUP_WORD, LOCATION_WORDS, word_order

logger = logging.getLogger(__name__)

def tile_factor_values(choice: Choice, extent: int, chosen: Sequence[int]) -> list[int]:
    """Legal values of the next tile factor after ``chosen`` (product must equal ``extent``).

    Perfect tile: every factor divides what is left; the last factor is what is left; the one
    before it must leave at most ``max_innermost``. Partitioned tile: the factors before
    ``partition_pos`` must leave a multiple of ``innerpart_factor``.
    """
    rest = extent // math.prod(chosen) if chosen else extent
    i, n = len(chosen), choice.n
    if i == n - 1:
        ok = [rest]
        if choice.kind == "tile" and choice.max_innermost > 0 and rest > choice.max_innermost:
            ok = []
        return ok
    divs = divisors(rest)
    if choice.kind == "tile":
        if i == n - 2 and choice.max_innermost > 0:
            return [d for d in divs if rest // d <= choice.max_innermost]
        return list(divs)
    if i < choice.partition_pos and choice.innerpart_factor > 1:
        return [d for d in divs if (rest // d) % choice.innerpart_factor == 0]
    return list(divs)


class DecisionState:
    """The decision part of one sentence being read or written, token by token.

    Holds a :class:`tlm.language.replay.LiveReplay` of the sketch, so every legal set is computed from
    the live schedule. ``legal()`` is the set of words that keep the sentence a valid
    program; ``feed(word)`` advances (raising :class:`LanguageError` on an illegal word).
    """

    def __init__(self, space: Space, sketch: Sketch, prompt_len: int, *,
                 healthy: bool | frozenset = False) -> None:
        from tlm.language.replay import LiveReplay, StaticReplay, static_domains

        self.space, self.sketch = space, sketch
        # writing only: tile factors kept out of the CPU's static failure modes (tlm.language.health)
        self.rules = rules_of(healthy)
        self.tiling = tiling_of(space, sketch) if self.rules else None
        self.position = prompt_len  # token position of the next word
        key = (space.uid,)
        self.replay = StaticReplay(sketch) if static_domains(sketch, space.hardware.kind) else \
            LiveReplay(sketch, space.task.mod, cache_key=key)
        self.values: list[tuple[Choice, Any]] = []  # (choice, decision value) so far
        self.ended = False  # [EOS] seen
        self._in_group = False
        self._typed: list[str] = []  # words of the number being written
        self._factors: list[int] = []  # tile factors of the group being written
        self._gpu_cache: dict[tuple, list[int]] = {}  # thread-feasible factors per position
        self._memo: tuple = ((), None)  # the last _values: (choice, decisions, factors so far) -> it

    # -- queries ---------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        return self.ended

    def legal(self) -> set[str]:
        """Words that may come next (empty once ``[EOS]`` has been read)."""
        if self.ended:
            return set()
        cur = self.replay.current()
        if cur is None:
            return {EOS}
        choice, domain = cur
        if not self._in_group:
            return {GROUP_WORD[choice.kind]}
        values, words = self._values(choice, domain)
        nxt, _ = next_number_tokens(values, self._typed)
        if not self._typed:
            nxt |= words
        return nxt

    def _thread_feasible(self, choice: Choice, extent: int, values: list[int]) -> list[int]:
        """GPU: keep the factors that let every thread/pipeline group and the shared memory
        stay within their limits (``tlm.language.gpu.feasible_factors``)."""
        from tlm.language.gpu import feasible_factors

        key = (choice.inst_index, tuple(self._factors), extent)
        hit = self._gpu_cache.get(key)
        if hit is None:
            tiles = {c.inst_index: (c.n, c.extent, c.max_innermost)
                     for c in self.sketch.choices if c.kind == "tile"}
            done = {c.inst_index: v for c, v in self.values if c.kind == "tile"}
            hit = feasible_factors(self.sketch.thread_groups, tiles, done, choice.inst_index,
                                   self._factors, extent, values, self.sketch.shared_memory)
            self._gpu_cache[key] = hit
        return hit

    def _allowed(self, word: str) -> bool:
        """``word in self.legal()``, without listing every compute location when reading."""
        cur = self.replay.current() if not self.ended else None
        if cur is not None and self._in_group and cur[0].kind == "at":
            words = {w: v for v, w in LOCATION_WORDS.items()}
            if not self._typed and word in words:
                return cur[1].allows_location(words[word])
            if not self._typed and word.isdigit() and int(word) <= 1024:  # loop indices are small
                return cur[1].allows_location(int(word))
            return word in self.legal()
        return word in self.legal()

    def _values(self, choice: Choice, domain: Any) -> tuple[list[int], set[str]]:
        """(legal numeric values, legal non-numeric words) of the value being written; the same
        until a factor or a choice is decided (kept: writing a word asks for them three times,
        and the healthy bounds were a fifth of a greedy request's constraint time)."""
        key = (choice.inst_index, len(self.values), len(self._factors))
        if self._memo[0] != key:
            self._memo = (key, self._compute_values(choice, domain))
        return self._memo[1]

    def _compute_values(self, choice: Choice, domain: Any) -> tuple[list[int], set[str]]:
        if choice.kind in ("tile", "ptile"):
            values = tile_factor_values(choice, domain.extent, self._factors)
            if choice.kind == "tile" and (self.sketch.thread_groups or self.sketch.shared_memory):
                values = self._thread_feasible(choice, domain.extent, values)
            if choice.kind == "tile" and self.tiling is not None:
                done = {c.inst_index: v for c, v in self.values if c.kind == "tile"}
                values = healthy_factors(self.tiling, choice.inst_index, choice.n, self._factors, domain.extent,
                                         done, values, self.rules)
            return values, set()
        if choice.kind == "pick":
            lanes = self.sketch.vector_lanes.get(choice.inst_index)
            return sorted(v for v in set(choice.candidates) if lanes is None or v <= lanes), set()
        if choice.kind == "parallel":
            done = {c.inst_index: v for c, v in self.values if c.kind == "tile"}
            return parallel_values(self.tiling, list(range(1, choice.max_parallel + 1)), self.rules, done), set()
        locs = domain.locations
        return [v for v in locs if v >= 0], {LOCATION_WORDS[v] for v in locs if v < 0}

    # -- advancing -------------------------------------------------------------------------
    def feed(self, word: str) -> None:
        """Read one word; raises :class:`LanguageError` naming the position when illegal."""
        if not self._allowed(word):
            raise LanguageError(self.position, self._why(word, self.legal()))
        self.position += 1
        if word == EOS:
            self.ended = True
            return
        choice, domain = self.replay.current()
        if not self._in_group:
            self._in_group = True
            return
        if choice.kind == "at" and not self._typed and word in LOCATION_WORDS.values():
            value = {w: v for v, w in LOCATION_WORDS.items()}[word]
        else:
            self._typed.append(word)
            values, _ = self._values(choice, domain)
            _, value = next_number_tokens(values, self._typed)
            if value is None:
                return
        self._typed = []
        if choice.kind in ("tile", "ptile"):
            self._factors.append(value)
            if len(self._factors) < choice.n:
                return
            value, self._factors = list(self._factors), []
        self._in_group = False
        self.values.append((choice, value))
        tvm_value = choice.candidates.index(value) if choice.kind == "pick" else value
        self.replay.decide(tvm_value)

    def _why(self, word: str, legal: set[str]) -> str:
        cur = self.replay.current()
        shown = " ".join(sorted(legal, key=word_order)[:12]) + (" ..." if len(legal) > 12 else "")
        if cur is None:
            where = "after the last decision"
        else:
            c, d = cur
            where = f"in the {c.kind} choice of instruction {c.inst_index}"
            if c.kind in ("tile", "ptile"):
                where += f" (loop extent {d.extent}, factors so far {self._factors or '[]'})"
            elif c.kind == "at":
                where += f" (legal locations {list(d.locations)})"
        return f"illegal word {word!r} {where}; legal: {shown or 'nothing'}"

    def close(self) -> None:
        self.replay.close()

    def trace(self) -> Any:
        """The sketch's trace with the decisions read so far (requires a complete sentence)."""
        if not self.ended:
            raise LanguageError(self.position, "the sentence is not complete")
        return build_trace(self.sketch, self.values)


def build_trace(sketch: Sketch, values: Sequence[tuple[Choice, Any]]) -> Any:
    """The sketch's instructions with parallel values replaced and every decision set."""
    import tvm
    from tvm.s_tir.schedule import Instruction, Trace

    by_index = {c.inst_index: v for c, v in values}
    insts, decisions = [], {}
    for i, inst in enumerate(sketch.trace.insts):
        if inst.kind.name == "EnterPostproc":
            break
        c = next((c for c in sketch.choices if c.inst_index == i), None)
        if c is not None and c.kind == "parallel":
            old = inst.inputs[1]
            new_val = tvm.tirx.IntImm(getattr(old, "dtype", "int32"), int(by_index[i]))
            inst = Instruction(inst.kind, [inst.inputs[0], new_val], inst.attrs, inst.outputs)
        insts.append(inst)
        if c is not None and c.kind != "parallel":
            v = by_index[i]
            if c.kind == "pick":
                v = c.candidates.index(v)
            decisions[inst] = [int(x) for x in v] if isinstance(v, list) else int(v)
    return Trace(insts, decisions)


def requested_decisions(sketch: Sketch, values: Sequence[tuple[Choice, Any]]) -> dict[int, Any]:
    """Instruction index -> TVM decision for the values of a sentence (for repair checks)."""
    out = {}
    for c, v in values:
        if c.kind == "parallel":
            continue
        out[c.inst_index] = c.candidates.index(v) if c.kind == "pick" else v
    return out


#: Constrained random walks tried before a sketch whose own decisions fail is called dead.
LIVENESS_WALKS = 4


def live_sketches(space: Space) -> list[Sketch]:
    """The sketches generation may choose: those some decisions make a valid program.

    Some sketches fail whatever the decisions (on CUDA, AutoInline's ReverseComputeInline into
    one of several consumers can leave a buffer no block allocates, so lowering fails); a
    prompt must not pick them. A sketch is alive when its own sampled decisions, or one of
    :data:`LIVENESS_WALKS` seeded walks through the legal words, pass every postprocessor;
    the verdict is kept on ``Sketch.dead`` ("" alive, else the last refusal).
    """
    return [sk for sk in space.sketches if is_live(space, sk)]


def first_live(space: Space, sketches: Sequence[Sketch]) -> Sketch | None:
    """The first of ``sketches`` that :func:`live_sketches` would keep, checking only as far as it
    (a check replays the sketch and runs every postprocessor: ~2 ms each); None when all are dead."""
    return next((sk for sk in sketches if is_live(space, sk)), None)


def is_live(space: Space, sk: Sketch) -> bool:
    """Whether ``sk`` gives a valid program (checked once, then kept on the sketch: ``sk.dead``)."""
    if sk.dead is None:
        sk.dead = _dead_reason(space, sk)
        if sk.dead:  # a property of the design space, not a fault: the demo's compile printed 8 of these
            logger.info("%s on %s: sketch %d gives no valid program (%s)", space.task.task_name,
                        space.hardware.key, sk.sketch_id, sk.dead)
    return not sk.dead


def _dead_reason(space: Space, sketch: Sketch) -> str:
    import random

    from tvm.s_tir.schedule import Schedule

    from collectors.sketches import refusing_postproc

    reason = ""
    sketch.choices  # noqa: B018 - its static facts read first: their replay of the own decisions is reused below
    rng = random.Random(sketch.sketch_id)
    for attempt in range(LIVENESS_WALKS + 1):
        if attempt == 0:
            trace = sketch.trace
        else:
            state = DecisionState(space, sketch, 0)
            try:
                while not state.ended:
                    state.feed(rng.choice(sorted(state.legal())))
            finally:
                state.close()
            trace = build_trace(sketch, state.values)
        sch = take_own_replay(sketch) if attempt == 0 else None
        if sch is None:
            sch = Schedule(space.task.mod)
            try:
                trace.apply_to_schedule(sch, remove_postproc=True)
            except Exception as exc:  # noqa: BLE001 - TVM raises its own error kinds
                reason = f"replay failed: {str(exc).splitlines()[-1][:200]}"
                continue
        refused = refusing_postproc(sch, space.task, space.hardware)
        if refused is None:
            return ""
        reason = f"{refused} rejected {attempt + 1} programs"
    return reason
