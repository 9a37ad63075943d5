"""Training checkpoints without pickle: model weights, optimizer moments and the loop's position.

A checkpoint directory is a loadable model directory (:func:`tlm.model.network.save_model`) plus
``optimizer.safetensors`` (AdamW's per-parameter tensors, flattened as ``<param index>.<name>``),
``optimizer.json`` (its param groups) and ``train_state.json`` (step, epoch, batches consumed in
the epoch, history). ``torch.save`` would pickle; a checkpoint that a resumed job, a server or a
user loads must not run code, so every file here is safetensors or JSON.
"""
from __future__ import annotations

import json
import os
from typing import Any

from tlm.model.network import ModelConfig, save_model

OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_GROUPS = "optimizer.json"
TRAIN_STATE = "train_state.json"


def save_checkpoint(path: str, *, model: Any, tokenizer: Any, cfg: ModelConfig, optimizer: Any,
                    state: dict, info: dict | None = None) -> str:
    """Write model + optimizer + loop state under ``path`` (created)."""
    from safetensors.torch import save_file

    save_model(model, tokenizer, cfg, path, info=info)
    sd = optimizer.state_dict()
    tensors = {f"{idx}.{name}": t.detach().cpu().contiguous()
               for idx, st in sd["state"].items() for name, t in st.items()}
    save_file(tensors, os.path.join(path, OPTIMIZER_TENSORS))
    with open(os.path.join(path, OPTIMIZER_GROUPS), "w") as f:
        json.dump(sd["param_groups"], f)
    with open(os.path.join(path, TRAIN_STATE), "w") as f:
        json.dump(state, f, indent=2)
    return path


def load_train_state(path: str) -> dict | None:
    """The loop position saved in a checkpoint, or None for a plain model directory."""
    p = os.path.join(path, TRAIN_STATE)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def load_optimizer_state(path: str, optimizer: Any) -> bool:
    """Restore AdamW's moments from a checkpoint into ``optimizer``; False when it has none."""
    from safetensors.torch import load_file

    tp, gp = os.path.join(path, OPTIMIZER_TENSORS), os.path.join(path, OPTIMIZER_GROUPS)
    if not (os.path.exists(tp) and os.path.exists(gp)):
        return False
    state: dict[int, dict[str, Any]] = {}
    for key, t in load_file(tp).items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = t
    with open(gp) as f:
        groups = json.load(f)
    optimizer.load_state_dict({"state": state, "param_groups": groups})
    return True
