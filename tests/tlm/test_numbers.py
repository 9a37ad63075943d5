import pytest
from hypothesis import given, strategies as st

from tlm.numbers import MAX_WORD, next_number_tokens, number_tokens, number_vocabulary, read_number


@given(st.integers(min_value=0, max_value=10**12))
def test_every_number_round_trips_and_uses_vocabulary_words(v):
    toks = number_tokens(v)
    assert read_number(toks, 0) == (v, len(toks))
    vocab = set(number_vocabulary()) | {str(d) for d in range(10)}
    assert set(toks) <= vocab


def test_small_numbers_are_one_word_large_are_spelled():
    assert number_tokens(17) == ["17"]
    assert number_tokens(MAX_WORD) == [str(MAX_WORD)]
    assert number_tokens(50257) == ["num5", "5", "0", "2", "5", "7"]


@pytest.mark.parametrize("bad", [["num5", "5", "0"], ["num4", "0", "1", "2", "3"], ["num4", "1", "0", "2", "4"], ["tile"]])
def test_malformed_numbers_raise(bad):
    with pytest.raises(ValueError):
        read_number(bad, 0)


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
