"""Sentences as training batches: ids, attention mask and labels that count decisions only.

The loss is causal-LM cross-entropy on the **decision tokens only** (and the closing
``[EOS]``): the prompt is given, not predicted, and padding is nothing (both are label
``IGNORE``). Predicting prompts would spend most of a small model's capacity on copying them.
The training loop, the evaluation and the scoring of candidates (:mod:`tlm.model.scoring`)
all batch sentences this one way.
"""
from __future__ import annotations

from typing import Any

IGNORE = -100  # label of a position that is not predicted (prompt, padding)


def encode_batch(texts: list[str], prompt_lens: list[int], vocab: dict[str, int], *, pad_id: int,
                 unk_id: int, max_len: int, weights: list[float] | None = None) -> dict[str, Any]:
    """Right-padded ``input_ids``, ``attention_mask``, ``labels`` (prompt and padding = -100)
    and per-sentence ``weights``. One word is one token (the tokenizer is WordLevel)."""
    import torch

    rows = [[vocab.get(w, unk_id) for w in t.split()] for t in texts]
    longest = max(len(r) for r in rows)
    if longest > max_len:
        raise ValueError(f"a sentence of {longest} tokens exceeds the model's {max_len} positions; "
                         "train a model with a longer context (ModelConfig.n_positions)")
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), longest), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, (r, p) in enumerate(zip(rows, prompt_lens)):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
        labels[i, p : len(r)] = ids[i, p : len(r)]
    w = torch.tensor(weights if weights is not None else [1.0] * len(rows), dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "weights": w}


def batch_encoding(tokenizer: Any, max_len: int) -> dict[str, Any]:
    """The keyword arguments of :func:`encode_batch` for ``tokenizer`` and a context of ``max_len``."""
    return {"vocab": tokenizer.get_vocab(), "pad_id": tokenizer.pad_token_id, "unk_id": tokenizer.unk_token_id,
            "max_len": max_len}


def masked_loss(logits: Any, labels: Any, weights: Any) -> tuple[Any, Any, Any, Any]:
    """``(loss, token_weight_sum, correct, counted)`` of next-token prediction on labelled positions.

    ``loss`` is the weighted mean cross-entropy over decision tokens; ``correct``/``counted``
    give the decision-token accuracy (argmax, unweighted).
    """
    import torch.nn.functional as F

    logits, target = logits[:, :-1, :], labels[:, 1:]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                         ignore_index=IGNORE, reduction="none").view(target.shape)
    counted = target != IGNORE
    tw = counted.float() * weights[:, None].to(ce.device)
    wsum = tw.sum()
    loss = (ce * tw).sum() / wsum.clamp_min(1e-12)
    correct = ((logits.argmax(-1) == target) & counted).sum()
    return loss, wsum, correct, counted.sum()
