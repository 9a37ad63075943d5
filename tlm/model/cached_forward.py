"""A lean GPT-2 forward over a growing KV cache: what a decoding step costs, and nothing else.

Why not ``GPT2LMHeadModel.forward``: a decoding step of the ``small`` model on a few rows is a
few hundred microseconds of arithmetic, and transformers' forward (cache objects, mask
builders, output dataclasses, hooks) adds several milliseconds of Python around it; the
generator takes 20-40 steps per task. This module runs the same arithmetic (the same
``addmm``, layer norms and scaled-dot-product attention on the model's own parameters, no
copy) and computes the vocabulary logits only where they are asked for.

It also lets each row feed a *different number* of tokens per call, the slots it does not
use masked: constrained decoding feeds every word that the grammar forces (one legal word)
in the same call as the free choice before it (:mod:`tlm.service.decoding`).

Equal to transformers' forward up to float rounding (tests/tlm/test_decoding.py); only the
architecture :func:`supports` accepts (GPT-2 with its default flags).
"""
from __future__ import annotations

from typing import Any


def supports(model: Any) -> bool:
    """True for a ``GPT2LMHeadModel`` whose forward this module reproduces (default GPT-2 flags)."""
    c = getattr(model, "config", None)
    return (getattr(c, "model_type", None) == "gpt2" and c.activation_function in ("gelu_new", "gelu_pytorch_tanh")
            and c.scale_attn_weights and not c.scale_attn_by_inverse_layer_idx and not c.reorder_and_upcast_attn
            and not c.add_cross_attention and not getattr(model, "training", False))


class CachedForward:
    """GPT-2 over a KV cache of ``slots`` positions per row, grown on demand.

    ``valid[row, slot]`` says which cache slots hold a token of that row: a row attends to its
    valid slots up to the query's own, so padding anywhere (left of a prompt, after a short
    chunk) is never seen. Positions are given per token, so a row's positions stay 0, 1, 2, ...
    whatever slots its tokens occupy.
    """

    def __init__(self, model: Any, rows: int, slots: int) -> None:
        import torch

        if not supports(model):
            raise ValueError("CachedForward reproduces GPT-2 with its default flags in eval mode only")
        tr, c = model.transformer, model.config
        self.d, self.heads, self.eps = c.n_embd, c.n_head, c.layer_norm_epsilon
        self.wte, self.wpe, self.head = tr.wte.weight, tr.wpe.weight, model.lm_head.weight
        self.blocks = [(b.ln_1.weight, b.ln_1.bias, b.attn.c_attn.weight, b.attn.c_attn.bias, b.attn.c_proj.weight,
                        b.attn.c_proj.bias, b.ln_2.weight, b.ln_2.bias, b.mlp.c_fc.weight, b.mlp.c_fc.bias,
                        b.mlp.c_proj.weight, b.mlp.c_proj.bias) for b in tr.h]
        self.ln_f = (tr.ln_f.weight, tr.ln_f.bias)
        hd = self.d // self.heads
        dt = self.wte.dtype
        self.cache = [(torch.zeros(rows, self.heads, slots, hd, dtype=dt), torch.zeros(rows, self.heads, slots, hd, dtype=dt))
                      for _ in self.blocks]
        self.valid = torch.zeros(rows, slots, dtype=torch.bool)
        self.used = 0  # slots handed out so far (the same for every row)

    def keep(self, rows: Any) -> None:
        """Keep only ``rows`` (indices, in the new order; repeats allowed): finished rows leave
        the batch, and one prompt's cache becomes several samples' caches."""
        self.cache = [(k[rows], v[rows]) for k, v in self.cache]
        self.valid = self.valid[rows]

    def _grow(self, need: int) -> None:
        import torch

        have = self.valid.shape[1]
        if need <= have:
            return
        more = max(need - have, have)
        self.cache = [(torch.cat([k, k.new_zeros(*k.shape[:2], more, k.shape[3])], 2),
                       torch.cat([v, v.new_zeros(*v.shape[:2], more, v.shape[3])], 2)) for k, v in self.cache]
        self.valid = torch.cat([self.valid, self.valid.new_zeros(self.valid.shape[0], more)], 1)

    def feed(self, ids: Any, positions: Any, real: Any, logits_at: Any = None) -> Any:
        """Write ``ids`` [rows, T] (positions [rows, T]; ``real`` [rows, T] bool: which are tokens,
        not padding) into the next T slots and return the logits [rows, T, vocab] (or only at
        ``logits_at``, a [rows] index of the position wanted per row: [rows, vocab])."""
        import torch
        import torch.nn.functional as F

        rows, t = ids.shape
        start = self.used
        self._grow(start + t)
        self.used = end = start + t
        self.valid[:, start:end] = real
        # query j of a row sees its valid slots up to its own; a padding query sees itself
        # (its output is never read: without a key it would be NaN and poison nothing but itself)
        own = torch.arange(start, end)
        mask = self.valid[:, None, :end] & (torch.arange(end)[None, :] <= own[:, None])[None]
        mask[:, torch.arange(t), own] |= ~real
        mask = mask[:, None]  # [rows, 1 (heads), T, slots]
        d, h = self.d, self.heads
        x = self.wte[ids] + self.wpe[positions]
        for (g1, b1, wa, ba, wp, bp, g2, b2, wf, bf, wm, bm), (kc, vc) in zip(self.blocks, self.cache):
            a = F.layer_norm(x, (d,), g1, b1, self.eps)
            q, k, v = torch.addmm(ba, a.view(rows * t, d), wa).view(rows, t, 3, h, d // h).unbind(2)
            kc[:, :, start:end] = k.transpose(1, 2)
            vc[:, :, start:end] = v.transpose(1, 2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), kc[:, :, :end], vc[:, :, :end], attn_mask=mask)
            x = x + torch.addmm(bp, a.transpose(1, 2).reshape(rows * t, d), wp).view(rows, t, d)
            a = F.layer_norm(x, (d,), g2, b2, self.eps).view(rows * t, d)
            x = x + torch.addmm(bm, F.gelu(torch.addmm(bf, a, wf), approximate="tanh"), wm).view(rows, t, d)
        if logits_at is not None:
            x = x[torch.arange(rows), logits_at]
        return F.layer_norm(x, (d,), *self.ln_f, self.eps) @ self.head.t()
