import pytest
from hypothesis import given, strategies as st

from tlm.language.numbers import MAX_WORD, next_number_tokens, number_tokens, number_vocabulary

#: legal values around the one-word limit and spelled ones (what a tile domain looks like)
VALUES = list(range(MAX_WORD + 80)) + [1234, 2048, 10000, 50257, 99999]


@given(st.integers(min_value=0, max_value=10**12))
def test_every_number_round_trips_through_the_constrained_walk_in_vocabulary_words(v):
    """The decoder reads numbers only through next_number_tokens: each word of a number's
    spelling is the one legal next word, and the last one completes exactly that value."""
    toks = number_tokens(v)
    for i, word in enumerate(toks):
        assert next_number_tokens([v], toks[:i]) == ({word}, None)
    assert next_number_tokens([v], toks) == (set(), v)
    vocab = set(number_vocabulary()) | {str(d) for d in range(10)}
    assert set(toks) <= vocab


def test_small_numbers_are_one_word_large_are_spelled():
    assert number_tokens(17) == ["17"]
    assert number_tokens(MAX_WORD) == [str(MAX_WORD)]
    assert number_tokens(50257) == ["num5", "5", "0", "2", "5", "7"]


@pytest.mark.parametrize("bad", [["num5", "5", "0"], ["num4", "0", "1", "2", "3"], ["num4", "1", "0", "2", "4"], ["tile"]])
def test_malformed_spellings_never_complete_a_value(bad):
    """Too few digits, a leading zero, a spelled number that has a word, or no number at all."""
    assert next_number_tokens(VALUES, bad)[1] is None


def test_negative_is_not_expressible():
    with pytest.raises(ValueError, match="-3"):
        number_tokens(-3)


def test_prefix_walk_spells_exactly_the_legal_values():
    values = [4, 2048, 2051, 50257]
    nxt, done = next_number_tokens(values, [])
    assert nxt == {"4", "num4", "num5"} and done is None
    nxt, _ = next_number_tokens(values, ["num4", "2", "0", "5"])
    assert nxt == {"1"}
    assert next_number_tokens(values, ["num4", "2", "0", "5", "1"]) == (set(), 2051)
