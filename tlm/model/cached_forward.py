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

    :meth:`freeze` turns what was fed so far into a prefix that every later row shares: a
    prompt's keys are then stored once, however many samples :meth:`keep` makes of it. Without
    it, 32 samples of each of 3 prompts held 96 copies of ~150 prompt slots, which every step
    read in full and every finished row copied (the ranked pool's decoding spent ~30% there).
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
        self.gapless = True  # every slot handed out holds a token of every row (no padding yet)
        # after freeze(): per layer the shared prefix's keys [heads, dim, P] (transposed for
        # the score product) and values [heads, P, dim]; which prefix slots each group sees
        # (an additive mask [groups, P]) and each row's group
        self.prefix: list[tuple[Any, Any]] | None = None
        self.prefix_mask: Any = None
        self.group: Any = None

    def keep(self, rows: Any) -> None:
        """Keep only ``rows`` (indices, in the new order; repeats allowed): finished rows leave
        the batch, and one prompt's cache becomes several samples' caches."""
        self.cache = [(k[rows], v[rows]) for k, v in self.cache]
        self.valid = self.valid[rows]
        if self.group is not None:
            self.group = self.group[rows]

    def freeze(self) -> None:
        """What each row was fed so far becomes a read-only prefix shared by that row and every
        row :meth:`keep` copies from it later: those rows attend to it where it is, and only the
        slots fed after the freeze are stored (and copied) per row."""
        import torch

        r, u, hd = self.valid.shape[0], self.used, self.d // self.heads
        if self.prefix is not None:
            raise ValueError("the cache is frozen already")
        # row g's slots sit at [g*u, (g+1)*u) of the prefix, seen by group g only
        self.prefix = [(k[:, :, :u].permute(1, 3, 0, 2).reshape(self.heads, hd, r * u),
                        v[:, :, :u].transpose(0, 1).reshape(self.heads, r * u, hd)) for k, v in self.cache]
        see = (torch.eye(r, dtype=torch.bool)[:, :, None] & self.valid[None, :, :u]).reshape(r, r * u)
        self.prefix_mask = torch.zeros(see.shape, dtype=self.wte.dtype).masked_fill_(~see, float("-inf"))
        self.group = torch.arange(r)
        self.cache = [(k.new_zeros(r, self.heads, 16, hd), v.new_zeros(r, self.heads, 16, hd)) for k, v in self.cache]
        self.valid = torch.zeros(r, 16, dtype=torch.bool)
        self.used = 0
        self.gapless = False  # the prefix path masks by group

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
        self.gapless = self.gapless and bool(real.all())
        if self.gapless:  # no padding anywhere (a greedy answer's one row): causal alone, no mask to build
            mask = None if t == 1 else torch.full((t, end), float("-inf"), dtype=self.wte.dtype).triu_(start + 1)
        else:
            # query j of a row sees its valid slots up to its own; a padding query sees itself
            # (its output is never read: without a key it would be NaN and poison nothing but itself).
            # An additive float mask: scaled_dot_product_attention's CPU kernel is ~1.4x faster with it
            own = torch.arange(start, end)
            see = self.valid[:, None, :end] & (torch.arange(end)[None, :] <= own[:, None])[None]
            see[:, torch.arange(t), own] |= ~real
            mask = torch.zeros(see.shape, dtype=self.wte.dtype).masked_fill_(~see, float("-inf"))[:, None]
        d, h = self.d, self.heads
        # the per-token arithmetic (projections, MLP, layer norms) runs on the real tokens only
        # where padding is a quarter or more: rows of a sampling step feed chunks of 1 to 10
        # forced words, padded to the longest (less padding: the gather costs what it saves)
        real_tokens = int(real.sum())
        sel = real.reshape(-1).nonzero().squeeze(1) if 4 * (rows * t - real_tokens) >= rows * t else None
        x = (self.wte[ids] + self.wpe[positions]).view(rows * t, d)
        if sel is not None:
            x = x[sel]
        for layer, (kc, vc) in enumerate(self.cache):
            g1, b1, wa, ba, wp, bp, g2, b2, wf, bf, wm, bm = self.blocks[layer]
            qkv = torch.addmm(ba, F.layer_norm(x, (d,), g1, b1, self.eps), wa)
            q, k, v = _unpack(qkv, sel, rows * t).view(rows, t, 3, h, d // h).unbind(2)
            kc[:, :, start:end] = k.transpose(1, 2)
            vc[:, :, start:end] = v.transpose(1, 2)
            if self.prefix is None:
                a = F.scaled_dot_product_attention(q.transpose(1, 2), kc[:, :, :end], vc[:, :, :end], attn_mask=mask)
            else:
                a = self._attend_with_prefix(q, kc[:, :, :end], vc[:, :, :end], mask, layer)
            a = a.transpose(1, 2).reshape(rows * t, d)
            x = x + torch.addmm(bp, a if sel is None else a[sel], wp)
            a = F.layer_norm(x, (d,), g2, b2, self.eps)
            x = x + torch.addmm(bm, F.gelu(torch.addmm(bf, a, wf), approximate="tanh"), wm)
        x = _unpack(x, sel, rows * t).view(rows, t, d)
        if logits_at is not None:
            x = x[torch.arange(rows), logits_at]
        return F.layer_norm(x, (d,), *self.ln_f, self.eps) @ self.head.t()

    def _attend_with_prefix(self, q: Any, k: Any, v: Any, mask: Any, layer: int) -> Any:
        """Attention of ``q`` [rows, T, heads, dim] over the shared prefix of each row's group and
        the row's own slots ``k``/``v`` [rows, heads, S, dim] (``mask`` [rows, 1, T, S]): one softmax
        over both, the prefix read once for all rows (a batched product over heads, never a
        per-row copy). Returns [rows, heads, T, dim]."""
        import torch

        rows, t, h, hd = q.shape
        kp, vp = self.prefix[layer]
        n_p = kp.shape[-1]
        scale = hd ** -0.5
        qh = q.transpose(1, 2)  # [rows, heads, T, dim]
        sp = torch.bmm(q.permute(2, 0, 1, 3).reshape(h, rows * t, hd), kp).view(h, rows, t, n_p).transpose(0, 1)
        sp = sp * scale + self.prefix_mask[self.group][:, None, None, :]
        ss = torch.matmul(qh, k.transpose(-1, -2)) * scale + mask
        p = torch.softmax(torch.cat([sp, ss], -1), -1)
        own = torch.matmul(p[..., n_p:], v)
        shared = torch.bmm(p[..., :n_p].transpose(0, 1).reshape(h, rows * t, n_p), vp).view(h, rows, t, hd)
        return own + shared.transpose(0, 1)


def _unpack(packed: Any, sel: Any, n: int) -> Any:
    """``packed`` [len(sel), w] back at rows ``sel`` of [n, w] (zeros elsewhere: padding); as is when
    ``sel`` is None (every token real)."""
    if sel is None:
        return packed
    out = packed.new_zeros(n, packed.shape[1])
    out[sel] = packed
    return out
