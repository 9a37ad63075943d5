"""The tensor language model: a GPT-2 (``transformers.GPT2LMHeadModel``) sized by a named preset.

A model directory is what ``save_pretrained`` writes (``config.json`` and
``model.safetensors``) plus the tokenizer (``tokenizer.json`` ...) and ``tlm_model.json``: the
:class:`ModelConfig` it was built from and how it was trained. :func:`load_model` reads the
weights with safetensors only (``use_safetensors=True``): nothing is unpickled.

Presets (``PRESETS``), like nanoGPT's: ``tiny`` for tests (seconds on a CPU), ``small`` (a few
million parameters; trains on a 2-core CPU within an hour on the seed corpus), ``base`` (GPT-2
124M's shape, for a GPU). The vocabulary comes from the tokenizer, the context length from the
longest sentence the model must read (with headroom for prompts longer than any seen).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

MODEL_CONFIG_FILE = "tlm_model.json"


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a TLM; stored with every checkpoint (``tlm_model.json``)."""

    preset: str = "small"  # the named preset this was built from (PRESETS)
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block (n_embd must divide by it)
    n_embd: int = 256  # hidden width
    n_positions: int = 1024  # longest sentence in tokens the model can read (prompt + decisions)
    dropout: float = 0.0  # residual/attention/embedding dropout; 0: the corpus is small but exact
    vocab_size: int = 0  # words of the tokenizer; 0 until :func:`model_config` fills it in
    pad_token_id: int = 0  # [PAD] of the tokenizer
    bos_token_id: int = 2  # [BOS]
    eos_token_id: int = 3  # [EOS]
    language: int = 1  # the prompt grammar version it reads and writes (tlm.language.LANGUAGE_VERSIONS)


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(preset="tiny", n_layer=2, n_head=2, n_embd=32, n_positions=512),
    "small": ModelConfig(preset="small", n_layer=4, n_head=4, n_embd=256, n_positions=1024),
    "base": ModelConfig(preset="base", n_layer=12, n_head=12, n_embd=768, n_positions=1024),
}


def context_length(longest_sentence: int, minimum: int) -> int:
    """Positions for sentences up to ``longest_sentence`` tokens: a power of two with a quarter
    of headroom (a new task's prompt may be longer than any in the corpus), at least ``minimum``."""
    if longest_sentence < 1:
        raise ValueError(f"longest sentence must be >= 1 token, got {longest_sentence}")
    need = longest_sentence + longest_sentence // 4
    n = 64
    while n < need:
        n *= 2
    return max(n, minimum)


def model_config(preset: str, tokenizer: Any, longest_sentence: int, **overrides: Any) -> ModelConfig:
    """The :class:`ModelConfig` of ``preset`` for this tokenizer and corpus.

    Raises ``ValueError`` naming the preset when it is unknown, or the field when an override is.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; known: {', '.join(PRESETS)}")
    names = {f.name for f in fields(ModelConfig)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ValueError(f"unknown model config field(s) {bad}; known: {sorted(names)}")
    base = PRESETS[preset]
    cfg = replace(
        base,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        n_positions=context_length(longest_sentence, base.n_positions),
    )
    cfg = replace(cfg, **overrides)
    if cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_embd {cfg.n_embd} is not divisible by n_head {cfg.n_head}")
    return cfg


def gpt2_config(cfg: ModelConfig) -> Any:
    """The ``transformers.GPT2Config`` of a :class:`ModelConfig`."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.n_positions, n_embd=cfg.n_embd,
        n_layer=cfg.n_layer, n_head=cfg.n_head, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout, bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id,
        pad_token_id=cfg.pad_token_id, tlm_language=cfg.language,
    )


def language_of(model: Any) -> int:
    """The prompt grammar version a loaded model reads (its ``config.json`` says; 1 for models
    saved before versions existed): the version its prompts must be written in."""
    return int(getattr(model.config, "tlm_language", 1) or 1)


def build_model(cfg: ModelConfig, *, seed: int = 0) -> Any:
    """A freshly initialised ``GPT2LMHeadModel`` (weights from ``seed``: the same on every worker)."""
    import torch
    from transformers import GPT2LMHeadModel

    if cfg.vocab_size <= 0:
        raise ValueError("ModelConfig.vocab_size is 0: build it with model_config(preset, tokenizer, ...)")
    torch.manual_seed(seed)
    return GPT2LMHeadModel(gpt2_config(cfg))


def save_model(model: Any, tokenizer: Any, cfg: ModelConfig, path: str, *, info: dict | None = None) -> str:
    """Write a loadable model directory: safetensors weights, tokenizer, ``tlm_model.json``.

    ``info`` (training stage, data, metrics, ...) is stored beside the config. A DDP-wrapped
    model is unwrapped first.
    """
    model = getattr(model, "module", model)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    with open(os.path.join(path, MODEL_CONFIG_FILE), "w") as f:
        json.dump({"model_config": asdict(cfg), **(info or {})}, f, indent=2, sort_keys=True)
    return path


def read_model_info(path: str) -> dict:
    """The ``tlm_model.json`` of a model directory (its config and training info)."""
    p = os.path.join(path, MODEL_CONFIG_FILE)
    if not os.path.exists(p):
        raise FileNotFoundError(f"{path} is not a TLM model directory: {MODEL_CONFIG_FILE} is missing")
    with open(p) as f:
        return json.load(f)


def model_language(path: str) -> int:
    """The prompt grammar version of a model directory (what a dataset to fine-tune it is built in)."""
    return int(read_model_info(path)["model_config"].get("language", 1))


def load_model(path: str) -> tuple[Any, Any, ModelConfig]:
    """``(model, tokenizer, config)`` of a model directory, weights through safetensors only."""
    from tlm.model.tokenizer import load_tokenizer

    info = read_model_info(path)
    cfg = ModelConfig(**info["model_config"])
    model = load_weights(path)
    model.config.tlm_language = cfg.language  # tlm_model.json is what the model says of itself
    model.eval()
    return model, load_tokenizer(path), cfg


def load_weights(path: str) -> Any:
    """The ``GPT2LMHeadModel`` of a model directory, from ``model.safetensors`` only: nothing is
    unpickled and a path is never taken for a hub id (nothing is downloaded)."""
    from transformers import GPT2LMHeadModel

    if not os.path.isdir(path):
        raise FileNotFoundError(f"model directory {path!r} does not exist (in {os.getcwd()})")
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        raise FileNotFoundError(f"{path} has no model.safetensors (only safetensors weights are loaded)")
    return GPT2LMHeadModel.from_pretrained(path, use_safetensors=True, local_files_only=True)
