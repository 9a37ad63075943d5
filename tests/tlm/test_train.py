"""The training loop, called directly (no Ray): masked loss, memorising a tiny set, resume.

Sentences come from records measured on a fixed Zen 4 (``sentence_sets``): they are only
tokenized here, nothing is run.
"""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tests.helpers.corpora import sentence_sets
from tlm.model.scoring import decision_logprobs
from tlm.model.network import PRESETS, build_model, context_length, load_model, model_config
from tlm.model.tokenizer import build_tokenizer
from tlm.model.batching import IGNORE, batch_encoding, encode_batch, masked_loss
from tlm.model.train import LocalSession, TrainConfig, train_loop_per_worker


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    out, _ = sentence_sets(tmp_path_factory.mktemp("train-sets"))
    rows = {}
    for r in pq.read_table(out / "pretrain.parquet").to_pylist():
        rows.setdefault(r["split"], []).append(r)
    return rows


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _enc(tok, max_len=512):
    return batch_encoding(tok, max_len)


def test_labels_are_the_decision_tokens_only(sets, tok):
    rows = sets["train"][:3]
    assert len(rows) == 3
    b = encode_batch([r["text"] for r in rows], [r["prompt_len"] for r in rows], **_enc(tok))
    for i, r in enumerate(rows):
        n, p = len(r["text"].split()), r["prompt_len"]
        labels, ids = b["labels"][i], b["input_ids"][i]
        assert (labels[:p] == IGNORE).all(), "prompt tokens must not be predicted"
        assert (labels[n:] == IGNORE).all() and (ids[n:] == tok.pad_token_id).all(), "padding is nothing"
        assert (labels[p:n] == ids[p:n]).all() and ids[n - 1] == tok.eos_token_id
        assert tok.convert_ids_to_tokens([int(ids[p - 1])]) == ["decide"]


def test_masked_loss_ignores_the_prompt_and_matches_hf_on_decisions(sets, tok):
    import torch

    rows = sets["train"][:4]
    b = encode_batch([r["text"] for r in rows], [r["prompt_len"] for r in rows], **_enc(tok))
    model = build_model(model_config("tiny", tok, 300))
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    loss, _, _, counted = masked_loss(logits, b["labels"], b["weights"])
    hf = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]).loss
    assert float(loss) == pytest.approx(float(hf), rel=1e-5)
    assert int(counted) == sum(len(r["text"].split()) - r["prompt_len"] for r in rows)
    # what the model says at prompt positions (before "decide") cannot change the loss
    noisy = logits.clone()
    p = min(r["prompt_len"] for r in rows)
    noisy[:, : p - 1, :] = torch.randn_like(noisy[:, : p - 1, :]) * 10
    assert float(masked_loss(noisy, b["labels"], b["weights"])[0]) == pytest.approx(float(loss), rel=1e-6)
    # a row of weight 0 (latency weighting) contributes nothing
    w = torch.tensor([1.0, 0.0, 0.0, 0.0])
    only_first = masked_loss(logits[:1], b["labels"][:1], w[:1])[0]
    assert float(masked_loss(logits, b["labels"], w)[0]) == pytest.approx(float(only_first), rel=1e-5)


def test_context_length_has_headroom_and_bad_presets_are_named(tok):
    assert context_length(400, 256) == 512 and context_length(500, 256) == 1024
    assert context_length(10, 256) == 256
    assert model_config("small", tok, 300).n_positions == PRESETS["small"].n_positions
    with pytest.raises(ValueError, match="unknown model preset 'huge'.*tiny, small, base"):
        model_config("huge", tok, 100)
    with pytest.raises(ValueError, match="unknown stage 'posttrain'"):
        TrainConfig(stage="posttrain")
    with pytest.raises(ValueError, match="weight_power must be > 0, got 0"):
        TrainConfig(weight_power=0)


def test_the_weight_power_sharpens_the_latency_weighting():
    from tlm.model.train import _columns

    batch = {"text": ["a", "b", "c"], "prompt_len": [1, 1, 1], "label": [1.0, 0.5, None]}
    assert _columns(batch, True)[2] == [1.0, 0.5, 1.0]
    assert _columns(batch, True, 4.0)[2] == [1.0, 0.0625, 1.0]  # a row without a label counts fully
    assert _columns(batch, False, 4.0)[2] is None


def _config(tok_dir, mcfg, cfg, session, total):
    from dataclasses import asdict

    return {"train": asdict(cfg), "model_config": asdict(mcfg), "tokenizer_dir": str(tok_dir),
            "total_steps": total, "steps_per_epoch": 2, "session": session, "info": {"stage": "pretrain"}}


@pytest.mark.slow
def test_the_loop_memorises_a_tiny_set_and_resumes_from_its_checkpoint(sets, tok, tmp_path):
    from transformers import GPT2LMHeadModel

    # one sentence per prompt: random samples of one sketch share a prompt and cannot all be memorised
    by_prompt = {}
    for r in sets["train"]:
        by_prompt.setdefault(" ".join(r["text"].split()[: r["prompt_len"]]), r)
    train = list(by_prompt.values())[:6]
    assert len(train) >= 3
    tok.save_pretrained(tmp_path / "tok")
    mcfg = model_config("tiny", tok, max(len(r["text"].split()) for r in train + sets["test"]))
    cfg = TrainConfig(preset="tiny", batch_size=len(train), lr=1e-2, warmup_steps=5, max_steps=80, eval_every=40, log_every=1000)
    session = LocalSession({"train": train, "test": sets["test"]}, str(tmp_path / "ckpt"))
    train_loop_per_worker(_config(tmp_path / "tok", mcfg, cfg, session, 80))

    first, last = session.reports[0], session.reports[-1]
    assert [r["step"] for r in session.reports] == [40, 80]
    assert last["train_loss"] < 0.1 < first["train_loss"], session.reports
    assert "eval_loss" in last and 0.0 <= last["eval_accuracy"] <= 1.0
    assert len(session.checkpoints) == 2
    model, _, loaded = load_model(session.checkpoints[-1])
    assert loaded == mcfg and isinstance(model, GPT2LMHeadModel)

    # the memorised set: greedy next-token accuracy on the decisions is (nearly) perfect
    b = encode_batch([r["text"] for r in train], [r["prompt_len"] for r in train], **_enc(tok))
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    _, _, correct, counted = masked_loss(out.logits, b["labels"], b["weights"])
    assert int(correct) / int(counted) > 0.9
    # ... and its decisions are what the model finds likely (the score the generator ranks by)
    scores = decision_logprobs(model, tok, [r["text"] for r in train], [r["prompt_len"] for r in train])
    assert [n for _, n in scores] == [len(r["text"].split()) - r["prompt_len"] for r in train]
    assert all(s / n > -0.1 for s, n in scores), scores

    # resuming from the first checkpoint continues at its step, with its optimizer state
    again = LocalSession({"train": train, "test": sets["test"]}, str(tmp_path / "ckpt2"),
                         resume_from=session.checkpoints[0])
    train_loop_per_worker(_config(tmp_path / "tok", mcfg, cfg, again, 80))
    assert [r["step"] for r in again.reports] == [80]
    assert again.reports[0]["train_loss"] < 0.1  # it went on from there, not from scratch


def test_too_little_data_is_a_clear_error(sets, tok, tmp_path):
    tok.save_pretrained(tmp_path / "tok")
    mcfg = model_config("tiny", tok, 300)
    cfg = TrainConfig(preset="tiny", batch_size=64, max_steps=3)
    session = LocalSession({"train": sets["train"][:2]}, str(tmp_path / "c"))
    with pytest.raises(ValueError, match="fewer sentences than one batch"):
        train_loop_per_worker(_config(tmp_path / "tok", mcfg, cfg, session, 3))
