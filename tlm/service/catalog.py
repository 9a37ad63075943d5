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


#: The cost models shipped per hardware key, ``<SHIPPED_COST_MODELS>/<key>/cost_model.tar``, each
#: fitted on the shipped corpus as ``tlm adapt`` fits one (the key's records and every other
#: key's; models/README.md has the command): a key the shipped corpus measured ranks its own
#: candidates with what was measured on it, whichever model writes them.
SHIPPED_COST_MODELS = os.path.join(SHIPPED_MODELS, "cost-models")


class NoModel(ValueError):
    """No model serves a hardware key (the message names the key and the keys that have one)."""


@dataclass(frozen=True)
class ModelEntry:
    """One model a generator can load."""

    model_id: str
    path: str  # a save_pretrained directory (safetensors)
    hardware_key: str | None  # the one key it is tuned to; None: pretrained, or tuned to several keys
    stage: str  # "pretrain" or "finetune"
    source: str  # "registry" or "shipped"
    hardware_keys: tuple[str, ...] = ()  # every key it was fine-tuned on (empty: pretrained)


def _entry(model_id: str, path: str, info: dict, source: str, hardware_key: str | None = None) -> ModelEntry:
    key = info.get("hardware_key", hardware_key)
    keys = tuple(info.get("hardware_keys") or ((key,) if key else ()))
    return ModelEntry(model_id, os.path.abspath(path), key, info.get("stage") or ("finetune" if keys else "pretrain"),
                      source, keys)


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
        out.append(_entry(name, path, info, "shipped"))
    return out


def registered_models(corpus: Any) -> list[ModelEntry]:
    """The usable models of the corpus index whose directory exists, newest first."""
    from storage.registry import usable
    from tlm.model.network import read_model_info

    out = []
    for row in corpus.models():
        if usable(row["metrics"]) and os.path.isdir(row["path"]):
            try:
                info = read_model_info(row["path"])
            except (FileNotFoundError, ValueError):
                info = {}
            out.append(_entry(row["model_id"], row["path"], info, "registry", row["hardware_key"]))
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


@dataclass(frozen=True)
class Serving:
    """The model that answers for a key, and whether it is another key's (a fallback)."""

    entry: ModelEntry
    fallback: bool  # True: the key has no model of its own; ``entry`` is the nearest one
    why: str = ""  # for a fallback: which key it was trained on and why that one


def serving_model(hardware: Any, corpus: Any | None = None, *, root: str = SHIPPED_MODELS) -> Serving:
    """The model that writes schedules for ``hardware`` (a ``collectors.hardware.Hardware``):
    :func:`model_for`'s when the key has one; else the nearest model of the same kind
    (``collectors.hardware.nearness``: same vector width, most ISA words in common), a model
    trained on several keys winning a tie, and when no model has the key's vector width, a
    multi-key model before a single other key's. Raises :class:`NoModel` when no fine-tuned
    model of that kind exists."""
    from collectors.hardware import hardware_for_key, nearness

    try:
        return Serving(model_for(hardware.key, corpus, root=root), False)
    except NoModel:
        pass

    def hw(key: str) -> Any:
        try:
            return hardware_for_key(key, corpus.hardware_info(key) if corpus is not None else None)
        except ValueError:  # a CUDA key without an index row: no facts to compare
            return None

    best = None
    for order, m in enumerate(available_models(corpus, root=root)):
        near = [(nearness(hardware, h), k) for k in m.hardware_keys if (h := hw(k)) is not None]
        if not near or max(near)[0][0] < 0:  # no key of its, or another kind
            continue
        (width, jaccard, cores), key = max(near)
        multi = int(len(m.hardware_keys) > 1)
        rank = (width, multi * (1 - width), jaccard, multi, cores, -order)  # see the docstring
        if best is None or rank > best[0]:
            best = (rank, key, m)
    if best is None:
        raise NoModel(f"no model for hardware {hardware.key!r} and none of its kind to fall back on "
                      f"(fine-tune one on this machine's corpus: tlm adapt)")
    (width, _, jaccard, *_), key, entry = best
    if hardware.key in entry.hardware_keys:  # a multi-key model that learnt this key: its own
        return Serving(entry, False)
    keys = "+".join(entry.hardware_keys)
    why = (f"{hardware.key} has no model; {entry.model_id} (trained on {keys}) is the nearest: "
           f"{'same' if width else 'another'} vector width, {jaccard:.0%} of ISA words shared with {key}")
    return Serving(entry, True, why)


def pretrained_model(corpus: Any | None = None, *, root: str = SHIPPED_MODELS) -> ModelEntry:
    """The newest pretrained model (registered, else shipped): the base for a new machine's fine-tune."""
    models = available_models(corpus, root=root)
    found = next((m for m in models if m.stage == "pretrain"), None)
    if found is None:
        raise NoModel(f"no pretrained model (registered or under {root})")
    return found


def chosen_model(hardware: Any, name: str | None = None, corpus: Any | None = None, *,
                 root: str = SHIPPED_MODELS) -> Serving:
    """The model a command writes ``hardware``'s schedules with: ``name`` (:func:`resolve_model`)
    when the user named one, never a fallback; else the one the server answers the key with
    (:func:`serving_model`: the key's own, else the nearest, a fallback whose ``why`` the command
    says). One rule for ``tlm compile`` and the benchmarks, so a benchmark judges what a
    deployer on that key gets."""
    if name:
        return Serving(resolve_model(name, corpus, root=root), False)
    return serving_model(hardware, corpus, root=root)


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


def key_cost_model(hardware_key: str, *, cost_models: str = SHIPPED_COST_MODELS) -> Any:
    """The cost model shipped for ``hardware_key`` (fitted on what the shipped corpus measured on
    it), or None: what ranks or searches for a key when no model directory is at hand (a compile
    that asks a server for its candidates still searches here, with this key's model)."""
    return ranker_of(os.path.join(cost_models, hardware_key))


def ranker_for(path: str, hardware_key: str, *, cost_models: str = SHIPPED_COST_MODELS) -> tuple[Any, str]:
    """The cost model that ranks ``hardware_key``'s candidates of the model at ``path``, and
    where it comes from: the model's own when it was fitted for this key; else the key's shipped
    cost model (fitted on what the shipped corpus measured on this key); else the model's own,
    fitted for another key (it still ranks better than the likelihood: bench/results/hardware.md);
    else ``(None, why)``: the generator ranks by likelihood."""
    own = ranker_of(path)
    if own is not None and own.config.hardware_key == hardware_key:
        return own, f"the model's own, fitted for {hardware_key}"
    shipped = key_cost_model(hardware_key, cost_models=cost_models)
    if shipped is not None:
        return shipped, f"{hardware_key}'s shipped cost model ({_fitted_on(os.path.join(cost_models, hardware_key))})"
    if own is not None:
        return own, f"the model's own, fitted for {own.config.hardware_key}"
    return None, "no cost model: ranked by likelihood"


def _fitted_on(directory: str) -> str:
    """'N records of KEY, ...' from a saved cost model's summary."""
    import json

    from collectors.cost_model import META_FILE

    with open(os.path.join(directory, META_FILE)) as f:
        summary = json.load(f).get("summary", {})
    by_key = summary.get("by_key") or {}
    return ", ".join(f"{n} records of {k}" for k, n in by_key.items()) or f"{summary.get('records', '?')} records"
