"""Training checkpoints without pickle: model weights, optimizer moments and the loop's position.

A checkpoint directory is a loadable model directory (:func:`tlm.model.network.save_model`) plus
``optimizer.safetensors`` (AdamW's per-parameter tensors, flattened as ``<param index>.<name>``),
``optimizer.json`` (its param groups) and ``train_state.json`` (step, epoch, batches consumed in
the epoch, history). ``torch.save`` would pickle; a checkpoint that a resumed job, a server or a
user loads must not run code, so every file here is safetensors or JSON.

``checkpoint_manifest.json``, written last, names every file with its size: a copy of the
directory (Ray uploads it file by file to the run's storage) is complete exactly when the manifest
reads and every file it names has its size. That lets a resumed run trust a checkpoint that Ray's
own record does not list yet (:func:`newest_complete`).
"""
from __future__ import annotations

import json
import os
from typing import Any

from tlm.model.network import ModelConfig, save_model

OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_GROUPS = "optimizer.json"
TRAIN_STATE = "train_state.json"
MANIFEST = "checkpoint_manifest.json"


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
    sizes = {name: os.path.getsize(os.path.join(path, name)) for name in sorted(os.listdir(path))
             if os.path.isfile(os.path.join(path, name))}
    with open(os.path.join(path, MANIFEST), "w") as f:
        json.dump({"files": sizes}, f, indent=2)
    return path


def is_complete(path: str) -> bool:
    """Whether ``path`` holds every file its manifest names, each of its size (a checkpoint
    written before manifests existed, or cut short while copied, is not)."""
    try:
        with open(os.path.join(path, MANIFEST)) as f:
            files = json.load(f)["files"]
        return all(os.path.getsize(os.path.join(path, name)) == size for name, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _step(path: str) -> int:
    return int((load_train_state(path) or {}).get("step", -1))


def newest_complete(run_dir: str) -> str | None:
    """The complete ``checkpoint_*`` directory of ``run_dir`` with the highest step, or None.

    Why not only Ray's record of the run: Ray Train lists a worker's checkpoint when its
    controller next polls the worker, so a run killed in that window leaves a checkpoint on disk
    that a rerun would otherwise never see (and start from scratch when it was the first).
    """
    if not os.path.isdir(run_dir):
        return None
    found = [p for p in (os.path.join(run_dir, n) for n in os.listdir(run_dir) if n.startswith("checkpoint_"))
             if os.path.isdir(p) and is_complete(p)]
    return max(found, key=lambda p: (_step(p), p), default=None)


def newer_checkpoint(registered: str | None, found: str | None) -> str | None:
    """The one of two checkpoints with the higher step (``registered`` on a tie): the runner's
    own (a worker restarted within a run resumes from a newer one than the run started with)
    against the newest complete one on disk when the run started."""
    if registered is None or found is None:
        return registered or found
    return found if _step(found) > _step(registered) else registered


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
