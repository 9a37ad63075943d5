"""A deployer's linear layers computed on whole tiles: ragged axes padded, on the PyTorch side.

Why: a schedule tiles a matmul's axes with perfect tiles, divisors of each axis's extent, and
an extent without the divisors the CPU wants leaves every program of the design space slow:

- **the output columns** (the stride-1 axis the vectors run along): GPT-2's tied LM head writes
  50,257 logits (29 x 1,733), no divisor a whole number of vectors, so every program wrote
  scalars or a few lanes: 355 ms against MKL's 32 ms (9.9 GFLOP at sequence 128), most of the
  whole model's 429 ms. Its weight padded with zero rows to 50,304 columns (a multiple of
  :data:`COLUMNS_TO`: 0.1% more work), then a slice of the first 50,257 in the same task: GPT-2
  from served schedules 522 -> 157 ms, PyTorch eager 173 ms (Rocket Lake,
  ``bench/results/prepack-padded-rocketlake-2c.md``).
- **the rows** (the tokens): a ViT's 197 (prime) leave the register tile one row or all of them;
  its dense layers ran 1.6-1.8x slower than MKL. The input padded with zero rows to 200 (a
  multiple of :data:`ROWS_TO`), the output sliced back: the ViT-B/16 layer 19.3-25.2 -> 17.4-18.3
  ms in three runs (eager 15.1-16.0). Padding rows is exact for a linear layer alone (each row its
  own product); the pads and slices fuse into the element-wise tasks around it.

Only where the extra work is at most :data:`MAX_EXTRA` of the layer's. Part of prepacking the
weights (``collectors.tasks.import_relax(prepack_weights=True)``): like the layout rewrite, a
padded weight is a constant laid out once, at compile time. The module given is never changed
(a deployer's compile checks its build against it); the copy shares its parameters.
"""
from __future__ import annotations

import copy
import functools
import itertools
from typing import Any

#: a padded column axis is a multiple of this many float32 columns (four AVX-512 vectors)
COLUMNS_TO = 64
#: vector lanes a column axis must divide into for no padding to be needed (float32, AVX-512)
LANES = 16
#: a padded row axis is a multiple of this many rows (the rules' register tile holds 4 or 8)
ROWS_TO = 8
#: padding is worth it only where the extra work is at most this share of the layer's
#: (ResNet-50's 1,000 classes -> 1,024: 2.4% more; a 10-class head or 7 rows stay as they are)
MAX_EXTRA = 1 / 16


def padded_columns(n: int) -> int:
    """The extent ``n`` output columns are computed at: ``n`` when it divides into whole vectors or
    padding would cost more than :data:`MAX_EXTRA`, else the next multiple of :data:`COLUMNS_TO`."""
    return n if n % LANES == 0 else _within_extra(n, COLUMNS_TO)


def padded_rows(m: int) -> int:
    """The extent ``m`` rows are computed at: the next multiple of :data:`ROWS_TO` where that costs
    at most :data:`MAX_EXTRA`, else ``m``."""
    return _within_extra(m, ROWS_TO)


def _within_extra(n: int, multiple: int) -> int:
    padded = -(-n // multiple) * multiple
    return padded if padded - n <= MAX_EXTRA * n else n


def pad_ragged_linears(module: Any) -> Any:
    """A copy of ``module`` whose ``nn.Linear`` layers compute their ragged axes padded
    (:func:`padded_columns`, :func:`padded_rows` of the rows they are called with) and slice the
    result back: the same outputs. The copy shares every parameter and buffer with ``module``
    (only a padded weight is new); ``module`` itself when it has no linear layer or cannot be copied."""
    import torch

    linears = [name for name, m in module.named_modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        return module
    shared = {id(t): t for t in itertools.chain(module.parameters(), module.buffers())}
    try:
        out = copy.deepcopy(module, shared)
    except (TypeError, RuntimeError, copy.Error):
        return module
    padded_linear = _padded_linear_class()
    for name in linears:
        parent, _, attr = name.rpartition(".")
        owner = out.get_submodule(parent) if parent else out
        setattr(owner, attr, padded_linear(getattr(owner, attr)))
    return out


@functools.lru_cache(maxsize=1)
def _padded_linear_class() -> Any:
    """The module class (made once, on first use: torch is imported lazily)."""
    import torch
    import torch.nn.functional as F

    class PaddedLinear(torch.nn.Module):
        """``linear`` over its output columns padded to :func:`padded_columns` and, at each call, its
        input rows to :func:`padded_rows`; the result sliced back. As ``linear`` where nothing is ragged."""

        def __init__(self, linear: Any) -> None:
            super().__init__()
            n = self.out_features = linear.out_features
            pad = padded_columns(n) - n
            self.weight, self.bias = linear.weight, linear.bias
            if pad:
                with torch.no_grad():
                    w, b = linear.weight.detach(), linear.bias
                    self.weight = torch.nn.Parameter(torch.cat([w, w.new_zeros(pad, w.shape[1])]), requires_grad=False)
                    self.bias = None if b is None else torch.nn.Parameter(
                        torch.cat([b.detach(), b.new_zeros(pad)]), requires_grad=False)

        def forward(self, x: Any) -> Any:
            m = x.shape[-2] if x.dim() >= 2 else 1
            rows = padded_rows(m)
            y = F.linear(F.pad(x, (0, 0, 0, rows - m)) if rows != m else x, self.weight, self.bias)
            if rows != m:
                y = y[..., :m, :]
            return y[..., :self.out_features] if y.shape[-1] != self.out_features else y

    return PaddedLinear
