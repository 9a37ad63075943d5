"""How the tensor language writes integers: whole words when small, spelled digits when large.

Choice and why:

* ``0`` .. ``1024`` are single words (``"64"``). Tile factors, unroll depths, parallel
  extents and most loop extents are in this range, and one word per value keeps sentences
  short and lets the model learn each common factor as a unit. All 1025 words are in the
  vocabulary *by construction* (the language defines them, a corpus does not), so a factor
  such as ``17`` or ``1009`` that no record ever held is still a word the model can emit.
* Larger values are the word ``num<k>`` (``k`` = number of decimal digits) followed by ``k``
  digit words: ``50257`` is ``num5 5 0 2 5 7``. Any non-negative integer is expressible, so
  generation is never limited to values seen in training, and the digit count up front means
  no terminator is needed and no number's spelling is a prefix of another's (which keeps
  constrained decoding a simple prefix walk, see :func:`next_number_tokens`).

Negative numbers are not part of the language: compute locations use the words ``root`` and
``inline`` for MetaSchedule's ``-1`` and ``-2``.
"""
from __future__ import annotations

import math

from collections.abc import Iterable, Sequence

#: Largest integer written as one word.
MAX_WORD = 1024
#: Largest digit count of a spelled number (values below 10**MAX_DIGITS are expressible).
MAX_DIGITS = 18

_WORDS = {str(i): i for i in range(MAX_WORD + 1)}
DIGITS = tuple(str(i) for i in range(10))
LENGTH_WORDS = tuple(f"num{k}" for k in range(len(str(MAX_WORD + 1)), MAX_DIGITS + 1))


def number_vocabulary() -> list[str]:
    """Every word the number syntax can produce (whole words, then the digit-count words)."""
    return [str(i) for i in range(MAX_WORD + 1)] + list(LENGTH_WORDS)


def number_tokens(value: int) -> list[str]:
    """The words that write ``value`` (raises ``ValueError`` for a negative or huge value)."""
    return list(_spelling(value))


_SPELLINGS: dict[int, tuple[str, ...]] = {}


def _spelling(value: int) -> tuple[str, ...]:
    """:func:`number_tokens` as a tuple, cached: constrained decoding spells every legal value
    of a choice at every word of every row (~1 million spellings for a full-size model's pools)."""
    hit = _SPELLINGS.get(value)
    if hit is not None:
        return hit
    value = int(value)
    if value < 0:
        raise ValueError(f"negative number {value} is not expressible in the tensor language")
    if value <= MAX_WORD:
        out: tuple[str, ...] = (str(value),)
    else:
        digits = str(value)
        if len(digits) > MAX_DIGITS:
            raise ValueError(f"number {value} has more than {MAX_DIGITS} digits")
        out = (f"num{len(digits)}", *digits)
    if len(_SPELLINGS) < 100_000:
        _SPELLINGS[value] = out
    return out


def next_number_tokens(values: Iterable[int], typed: Sequence[str]) -> tuple[set[str], int | None]:
    """Constrained step inside a number.

    ``values`` are the legal integers, ``typed`` the words of the number written so far.
    Returns ``(legal next words, completed value or None)``: the value is set when ``typed``
    already spells one legal value completely (then the legal set is empty, since no
    spelling is a prefix of another).
    """
    n = len(typed)
    typed = tuple(typed)
    nxt: set[str] = set()
    for v in values:
        toks = _spelling(v)
        if len(toks) > n and toks[:n] == typed:
            nxt.add(toks[n])
        elif len(toks) == n and toks == typed:
            return set(), int(v)
    return nxt, None


_DIVISORS: dict[int, tuple[int, ...]] = {}


def divisors(n: int) -> tuple[int, ...]:
    """All divisors of ``n`` in increasing order (cached)."""
    d = _DIVISORS.get(n)
    if d is None:
        small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
        d = tuple(sorted(set(small + [n // i for i in small])))
        if len(_DIVISORS) < 100_000:
            _DIVISORS[n] = d
    return d
