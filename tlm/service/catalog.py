"""Which model writes schedules for which hardware: the shipped models and the registry, in one place.

Two sources: the models the repository ships under ``models/`` (each directory's
``tlm_model.json`` says its stage and hardware key) and the corpus index's ``models`` table
(what ``tlm train`` registered). :func:`model_for` is the one rule the generator, ``tlm
compile``, ``tlm collect --strategy tlm`` and the server use: the newest usable registered
model of that hardware key whose directory exists, else the shipped fine-tuned model of that
key. A pretrained model is hardware-independent and never answers for a key by itself: its
schedules are not tuned to any machine, and a deployer should hear that rather than receive
them silently (fine-tune it: ``tlm train --stage finetune --base shipped``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

#: Where the repository ships its models (``tlm train --base shipped``).
#: The repository's models/ (this file is <root>/tlm/service/catalog.py).
SHIPPED_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models")


class NoModel(ValueError):
    """No model serves a hardware key (the message names the key and the keys that have one)."""


@dataclass(frozen=True)
class ModelEntry:
    """One model a generator can load."""

    model_id: str
    path: str  # a save_pretrained directory (safetensors)
    hardware_key: str | None  # None: a pretrained, hardware-independent model
    stage: str  # "pretrain" or "finetune"
    source: str  # "registry" or "shipped"


def shipped_models(root: str = SHIPPED_MODELS) -> list[ModelEntry]:
    """The model directories under ``root`` (sorted by name); directories without a model are skipped."""
    from tlm.model.network import read_model_info

    out = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, name)
        try:
            info = read_model_info(path)
        except (FileNotFoundError, ValueError):
            continue
        out.append(ModelEntry(name, os.path.abspath(path), info.get("hardware_key"),
                              info.get("stage") or "finetune", "shipped"))
    return out


def registered_models(corpus: Any) -> list[ModelEntry]:
    """The usable models of the corpus index whose directory exists, newest first."""
    from storage.registry import usable

    out = []
    for row in corpus.models():
        if usable(row["metrics"]) and os.path.isdir(row["path"]):
            out.append(ModelEntry(row["model_id"], row["path"], row["hardware_key"],
                                  "finetune" if row["hardware_key"] else "pretrain", "registry"))
    return out


def available_models(corpus: Any | None = None, *, root: str = SHIPPED_MODELS) -> list[ModelEntry]:
    """Every model that can be loaded: the registry's (newest first), then the shipped ones."""
    return (registered_models(corpus) if corpus is not None else []) + shipped_models(root)


def model_for(hardware_key: str, corpus: Any | None = None, *, root: str = SHIPPED_MODELS) -> ModelEntry:
    """The model that writes schedules for ``hardware_key`` (module docstring); raises :class:`NoModel`."""
    models = available_models(corpus, root=root)
    for m in models:
        if m.hardware_key == hardware_key:
            return m
    keys = sorted({m.hardware_key for m in models if m.hardware_key})
    raise NoModel(f"no model for hardware {hardware_key!r}; models exist for: {', '.join(keys) or 'none'} "
                  f"(fine-tune one on this machine's corpus: tlm train --stage finetune --base shipped)")


def pretrained_model(corpus: Any | None = None, *, root: str = SHIPPED_MODELS) -> ModelEntry:
    """The newest pretrained model (registered, else shipped): the base for a new machine's fine-tune."""
    models = available_models(corpus, root=root)
    found = next((m for m in models if m.stage == "pretrain"), None)
    if found is None:
        raise NoModel(f"no pretrained model (registered or under {root})")
    return found


def resolve_model(name: str, corpus: Any | None = None, *, root: str = SHIPPED_MODELS) -> ModelEntry:
    """A model named by the user: a directory, a registered or shipped model id, or ``shipped``
    (the pretrained base). Raises :class:`NoModel` naming what is accepted."""
    from tlm.model.network import read_model_info

    if name == "shipped":
        return pretrained_model(None, root=root)
    if os.path.isdir(name):  # absolute: Ray workers do not run in this directory
        info = read_model_info(name)
        return ModelEntry(os.path.basename(os.path.normpath(name)), os.path.abspath(name),
                          info.get("hardware_key"), info.get("stage") or "finetune", "directory")
    models = available_models(corpus, root=root)
    for m in models:
        if m.model_id == name:
            return m
    raise NoModel(f"unknown model {name!r}: not a model directory, 'shipped', or one of "
                  f"{', '.join(m.model_id for m in models) or 'no models'}")


def ranker_of(path: str) -> Any:
    """The cost model saved in a model's directory (``tlm cost-model fit --out DIR``), or None:
    with it the generator ranks a sampled pool by predicted speed instead of likelihood."""
    from collectors.cost_model import COST_MODEL_FILE, CostModel

    return CostModel.load(path) if os.path.exists(os.path.join(path, COST_MODEL_FILE)) else None
