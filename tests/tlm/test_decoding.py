"""The fast decoding path gives what ``transformers`` gives: the same logits, words and scores.

:class:`tlm.model.cached_forward.CachedForward` against ``GPT2LMHeadModel.forward`` (padding
on the left and inside, rows fed different lengths), and :func:`decode_prompts` on its fast
path against the ``transformers.generate`` path it replaced (still the path of beams and of
models the fast forward does not support), with a random GPT-2: it prefers nothing, so its
greedy choices change with the slightest difference in the logits' order.
"""
from __future__ import annotations

import pytest
import torch

import tlm.model.cached_forward as cached_forward
from tlm.language import build_space, live_sketches, prompt_tokens
from tlm.model.cached_forward import CachedForward, supports
from tlm.model.network import build_model, model_config
from tlm.model.scoring import decision_logprobs
from tlm.model.tokenizer import build_tokenizer
from tlm.service.generator import decode_prompts


@pytest.fixture(scope="module")
def lm():
    tok = build_tokenizer()
    return build_model(model_config("tiny", tok, 400), seed=1).eval(), tok


def test_cached_forward_equals_the_transformers_forward(lm):
    """Three rows of 12, 7 and 3 tokens fed in two calls: the first 5 (left-padded, as the
    tokenizer pads prompts), then the rest (right-padded: 7, 2 and 0 tokens), against each
    row alone through ``GPT2LMHeadModel``."""
    model, _ = lm
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(4, model.config.vocab_size, (n,), generator=g) for n in (12, 7, 3)]
    with torch.no_grad():
        want = [model(input_ids=s[None]).logits[0] for s in seqs]
        cache = CachedForward(model, 3, 4)  # grows as it is fed
        got: list[list] = [[], [], []]
        for lo, hi, left in ((0, 5, True), (5, 12, False)):
            ids = torch.zeros(3, hi - lo, dtype=torch.long)
            pos = torch.zeros(3, hi - lo, dtype=torch.long)
            real = torch.zeros(3, hi - lo, dtype=torch.bool)
            where = []
            for r, s in enumerate(seqs):
                part = s[lo:hi]
                at = (hi - lo - len(part)) if left else 0
                ids[r, at: at + len(part)] = part
                pos[r, at: at + len(part)] = torch.arange(lo, lo + len(part))
                real[r, at: at + len(part)] = True
                where.append((at, len(part)))
            out = cache.feed(ids, pos, real)
            for r, (at, n) in enumerate(where):
                got[r] += list(out[r, at: at + n])
    for r in range(3):
        torch.testing.assert_close(torch.stack(got[r]), want[r], atol=1e-4, rtol=1e-4)


def test_one_row_without_padding_equals_the_transformers_forward(lm):
    """A greedy answer of one decodes one row, never padded: no mask is built (causal alone), fed
    as a prompt, one word, then a chunk of forced words."""
    model, _ = lm
    seq = torch.randint(4, model.config.vocab_size, (14,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(input_ids=seq[None]).logits[0]
        cache = CachedForward(model, 1, 4)  # grows as it is fed
        got = []
        for lo, hi in ((0, 9), (9, 10), (10, 14)):
            n = hi - lo
            got.append(cache.feed(seq[None, lo:hi], torch.arange(lo, hi)[None], torch.ones(1, n, dtype=torch.bool))[0])
    assert cache.gapless
    torch.testing.assert_close(torch.cat(got), want, atol=1e-4, rtol=1e-4)


def test_a_frozen_prefix_gives_what_copying_it_gives(lm):
    """Two prompts (9 and 6 tokens, right-padded) frozen, then 3 copies of each fed chunks of
    different lengths (padded, some rows finished early and dropped by ``keep``): the same
    logits as the plain cache that copies every prompt to every row."""
    model, _ = lm
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, model.config.vocab_size, (n,), generator=g) for n in (9, 6)]
    ids = torch.zeros(2, 9, dtype=torch.long)
    real = torch.zeros(2, 9, dtype=torch.bool)
    for r, p in enumerate(prompts):
        ids[r, : len(p)], real[r, : len(p)] = p, True
    rows = torch.tensor([0, 0, 0, 1, 1, 1])
    steps = [torch.randint(4, model.config.vocab_size, (6, 3), generator=g) for _ in range(3)]
    lengths = [[1, 3, 2, 1, 2, 3], [2, 1, 1, 3, 1, 2], [1, 1, 2, 1, 3, 1]]
    outs = {}
    with torch.no_grad():
        for frozen in (False, True):
            cache = CachedForward(model, 2, 4)
            cache.feed(ids, torch.arange(9)[None].expand(2, 9), real)
            if frozen:
                cache.freeze()
            cache.keep(rows)
            pos = torch.tensor([len(prompts[int(r)]) for r in rows])
            got = []
            for step, (chunk, n) in enumerate(zip(steps, lengths)):
                n = torch.tensor(n)
                if step == 2:  # rows 1 and 4 finished: they leave the batch
                    keep = torch.tensor([0, 2, 3, 5])
                    cache.keep(keep)
                    chunk, n, pos = chunk[keep], n[keep], pos[keep]
                mask = torch.arange(3)[None] < n[:, None]
                out = cache.feed(chunk, pos[:, None] + torch.arange(3)[None], mask)
                got.append(out[mask])
                pos = pos + n
            outs[frozen] = torch.cat(got)
    torch.testing.assert_close(outs[True], outs[False], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="frozen already"):
        cache.freeze()


def test_only_plain_gpt2_in_eval_mode_is_supported(lm):
    model, _ = lm
    assert supports(model)
    model.train()
    try:
        assert not supports(model)
        with pytest.raises(ValueError, match="eval mode"):
            CachedForward(model, 1, 1)
    finally:
        model.eval()


@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d"])
def test_greedy_words_and_scores_equal_transformers_generate(lm, tasks, cpu_hw, name, monkeypatch):
    model, tok = lm
    task = tasks[name]
    space = build_space(task, cpu_hw)
    prompts = [prompt_tokens(space, sk) for sk in live_sketches(space)]
    fast = decode_prompts(model, tok, task, cpu_hw, prompts, 1)
    monkeypatch.setattr(cached_forward, "supports", lambda m: False)
    slow = decode_prompts(model, tok, task, cpu_hw, prompts, 1)
    assert [r[:2] for r in fast] == [r[:2] for r in slow]
    for (_, _, (a, n)), (_, _, (b, m)) in zip(fast, slow):
        assert n == m and a == pytest.approx(b, abs=1e-3)


def test_samples_are_seeded_valid_and_scored_like_the_model_scores_them(lm, tasks, cpu_hw):
    model, tok = lm
    task = tasks["matmul"]
    space = build_space(task, cpu_hw)
    prompts = [prompt_tokens(space, sk) for sk in live_sketches(space)]
    rows = decode_prompts(model, tok, task, cpu_hw, prompts, 4, sample=True, seed=3)
    assert [i for i, _, _ in rows] == [i for i in range(len(prompts)) for _ in range(4)]
    assert rows == decode_prompts(model, tok, task, cpu_hw, prompts, 4, sample=True, seed=3)
    assert len({tuple(w) for _, w, _ in rows}) > len(prompts), "samples differ"
    rescored = decision_logprobs(model, tok, [" ".join(prompts[i] + w) for i, w, _ in rows],
                                 [len(prompts[i]) for i, _, _ in rows])
    for (_, words, (lp, n)), (want, m) in zip(rows, rescored):
        assert words[-1] == "[EOS]" and n == m == len(words)
        assert lp == pytest.approx(want, abs=1e-3)


def test_a_cold_pool_is_the_greedy_program_and_scores_stay_the_models(lm, tasks, cpu_hw):
    """The ranked pool's temperature divides the logits a sample is drawn from, never its score:
    near zero every sample is its prompt's greedy program, scored as greedy scores it; zero is refused."""
    model, tok = lm
    task = tasks["matmul"]
    space = build_space(task, cpu_hw)
    prompts = [prompt_tokens(space, sk) for sk in live_sketches(space)]
    greedy = decode_prompts(model, tok, task, cpu_hw, prompts, 1)
    cold = decode_prompts(model, tok, task, cpu_hw, prompts, 3, sample=True, seed=5, temperature=1e-5)
    for i, words, (lp, n) in cold:
        assert words == greedy[i][1]
        assert lp == pytest.approx(greedy[i][2][0], abs=1e-3) and n == greedy[i][2][1]
    with pytest.raises(ValueError, match="temperature"):
        decode_prompts(model, tok, task, cpu_hw, prompts, 3, sample=True, temperature=0.0)


def test_decoding_takes_every_core_on_a_quiet_host_and_one_beside_a_measurement(monkeypatch):
    """A second thread's barrier cost seconds beside a collection (2-core Zen 3) and the prefill
    shares two quiet cores well (greedy p50 40 against 53 ms, Rocket Lake): the default decides
    per generation; TLM_DECODE_THREADS (DECODE_THREADS) overrides it."""
    import torch

    import tlm.service.generator as generator
    from collectors.host_load import measuring_job

    monkeypatch.setattr(generator, "DECODE_THREADS", None)
    monkeypatch.setattr("collectors.host_load.other_measuring_jobs", lambda: [])
    assert generator.decode_threads() == torch.get_num_threads()
    with measuring_job("a test's measurement"):
        assert generator.decode_threads() == 1
    monkeypatch.setattr("collectors.host_load.other_measuring_jobs", lambda: [{"pid": 1, "what": "a collection"}])
    assert generator.decode_threads() == 1
    monkeypatch.setattr(generator, "DECODE_THREADS", 3)
    assert generator.decode_threads() == 3


def test_the_kept_vocabulary_is_the_tokenizers_and_follows_words_added_to_it():
    """The generator keeps each tokenizer's vocabulary (``get_vocab`` rebuilds it on every call);
    a tokenizer that learns words (a newer language version) is read again."""
    from tlm.service.constrained import vocabulary

    tok = build_tokenizer(set())
    kept = vocabulary(tok)
    assert kept == tok.get_vocab() and vocabulary(tok) is kept
    tok.add_tokens(["a_word_no_language_has"])
    assert vocabulary(tok) == tok.get_vocab() and "a_word_no_language_has" in vocabulary(tok)
