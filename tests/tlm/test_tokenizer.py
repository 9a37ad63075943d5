"""Tokenizer: the language's vocabulary, save/load, unknown-word fallback."""
from __future__ import annotations

from tests.helpers.language import sample_traces
from tlm.language import encode
from tlm.language.numbers import MAX_WORD
from tlm.model.tokenizer import build_tokenizer, language_vocabulary, load_tokenizer, unknown_words


def test_vocabulary_is_defined_by_the_language_not_a_corpus():
    vocab = language_vocabulary()
    assert vocab[:4] == ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
    assert len(vocab) == len(set(vocab))
    for w in ("17", "1009", str(MAX_WORD), "num7", "SamplePerfectTile", "tile", "root", "znver4", "sm_90"):
        assert w in vocab


def test_sentences_round_trip_through_ids_and_save_load(tmp_path, tasks, cpu_hw):
    tok = build_tokenizer()
    task = tasks["conv2d"]
    s = encode(task, cpu_hw, sample_traces(task, cpu_hw, per_sketch=1)[0])
    assert unknown_words(s.tokens, tok) == []
    ids = tok(s.text)["input_ids"]
    assert len(ids) == len(s.tokens)
    assert tok.convert_ids_to_tokens(ids) == list(s.tokens)
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    assert again(s.text)["input_ids"] == ids
    assert again.pad_token == "[PAD]" and again.eos_token == "[EOS]" and again.bos_token == "[BOS]"
    assert again.pad_token_id == 0


def test_unknown_prompt_words_map_to_unk_and_never_crash():
    tok = build_tokenizer()
    ids = tok("[BOS] hw cpu arch frobnicator9000 cores 2")["input_ids"]
    assert ids[4] == tok.unk_token_id
    assert tok.convert_ids_to_tokens(ids)[4] == "[UNK]"


def test_extra_words_extend_the_vocabulary():
    tok = build_tokenizer(extra_words=["frobnicator9000"])
    ids = tok("arch frobnicator9000")["input_ids"]
    assert tok.unk_token_id not in ids
    assert len(tok) == len(language_vocabulary()) + 1
