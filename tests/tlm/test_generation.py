"""The LogitsProcessor drives a real (tiny, random) GPT-2 to valid programs only."""
from __future__ import annotations

import pytest

from tlm.language import apply_sentence
from tlm.service.constrained import make_logits_processor
from tlm.language import EOS, prompt_tokens
from tlm.language.space import build_space
from tlm.model.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tiny_lm():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=1, n_head=2,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return tok, GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("name", ["matmul", "softmax"])
def test_random_model_generates_only_valid_programs(tiny_lm, tasks, cpu_hw, name):
    import torch

    tok, model = tiny_lm
    task = tasks[name]
    space = build_space(task, cpu_hw)
    prompts = [prompt_tokens(space, sk) for sk in space.sketches[:3]]
    assert prompts
    batch = tok([" ".join(p) for p in prompts], return_tensors="pt", padding=True)
    width = batch["input_ids"].shape[1]
    proc = make_logits_processor(tok, task, cpu_hw, prompts, width)
    torch.manual_seed(1)
    out = model.generate(**batch, logits_processor=[proc], do_sample=True, top_k=0, max_new_tokens=80,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    for row, prompt in enumerate(prompts):
        new = [w for w in tok.convert_ids_to_tokens(out[row, width:].tolist()) if w != "[PAD]"]
        assert new and new[-1] == EOS, f"row {row} did not finish: {new[-8:]}"
        apply_sentence(prompt + new, task, cpu_hw)  # valid as generated, nothing repaired


def test_unconstrained_random_model_is_not_valid(tiny_lm, tasks, cpu_hw):
    """Control: without the processor the same model does not write programs."""
    import torch

    from tlm.language import LanguageError

    tok, model = tiny_lm
    task = tasks["matmul"]
    space = build_space(task, cpu_hw)
    prompt = prompt_tokens(space, space.sketches[0])
    batch = tok(" ".join(prompt), return_tensors="pt")
    torch.manual_seed(1)
    out = model.generate(**batch, do_sample=True, top_k=0, max_new_tokens=30, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id)
    new = tok.convert_ids_to_tokens(out[0, batch["input_ids"].shape[1]:].tolist())
    with pytest.raises(LanguageError):
        apply_sentence(prompt + new, task, cpu_hw)
