"""How likely a model finds a schedule: the log-probability of a sentence's decisions.

Used to rank generated candidates (the generator) and to judge a model by whether it prefers
the fast schedules of a task.
"""
from __future__ import annotations

from typing import Any

from tlm.model.batching import IGNORE, batch_encoding, encode_batch


def decision_logprobs(model: Any, tokenizer: Any, texts: list[str], prompt_lens: list[int], *,
                      batch_size: int = 16) -> list[tuple[float, int]]:
    """``(sum of log-probabilities, tokens)`` of each sentence's decisions (and ``[EOS]``) given its
    prompt: how likely the model finds a schedule, for ranking candidates or judging a model
    by whether it prefers the fast ones."""
    import torch

    enc = batch_encoding(tokenizer, model.config.n_positions)
    out: list[tuple[float, int]] = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            b = encode_batch(texts[i : i + batch_size], prompt_lens[i : i + batch_size], **enc)
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1].float()
            target = b["labels"][:, 1:]
            counted = target != IGNORE
            lp = torch.log_softmax(logits, -1).gather(-1, target.clamp_min(0)[..., None])[..., 0]
            lp = (lp * counted).sum(-1)
            out += [(float(s), int(n)) for s, n in zip(lp, counted.sum(-1))]
    return out
