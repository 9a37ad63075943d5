"""The model zoo: the six families the TLM paper trains on, built from HF configs.

Every model is made from a ``transformers`` config with random weights (nothing downloaded)
and wrapped so that its forward takes plain tensors and returns one tensor, which is what
``torch.export`` → ``from_exported_program`` needs. Workarounds (docs/STACK.md):
GPT-2 and LLaMA get an explicit all-ones ``attention_mask`` (their implicit causal-mask path
uses ``cumsum`` on bools, which TVM's LLVM codegen rejects) and ``use_cache=False``;
EfficientNet's ``AvgPool2d(ceil_mode=True)`` pooler becomes ``AdaptiveAvgPool2d(1)``; CNNs are
re-initialised with PyTorch defaults and random BatchNorm statistics so their outputs are
not ~1e-21 (which would make any comparison meaningless).

``small=True`` gives tiny variants (few layers, narrow) for tests; the full variants use the
real architectures' sizes (ResNet-50, MobileNetV2 1.0, EfficientNet-B0, BERT-base, GPT-2 124M,
one LLaMA-7B decoder layer).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

logger = logging.getLogger(__name__)

MODEL_NAMES = ("resnet50", "mobilenetv2", "efficientnet_b0", "bert_base", "gpt2", "llama7b_layer")
CNN_MODELS = ("resnet50", "mobilenetv2", "efficientnet_b0")
#: The zoo models the shipped TLM never trains on: one CNN family and one transformer family,
#: held out whole (every workload that occurs in either is in the test split), so the quality
#: benchmark, the demo and the training hook judge on programs the model never saw. Every
#: model records the list it was trained with (``held_out_models`` in ``tlm_model.json``).
HELD_OUT_MODELS = ("mobilenetv2", "bert_base")


def build_model(name: str, *, batch: int = 1, image_size: int | None = None, seq_len: int | None = None,
                small: bool = False, seed: int = 0) -> tuple[Any, tuple]:
    """(torch module in eval mode, example args) for zoo model ``name``.

    ``image_size`` defaults to 224 (32 when ``small``), ``seq_len`` to 32 (8 when ``small``).
    """
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown zoo model {name!r}; choose from {', '.join(MODEL_NAMES)}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    import torch

    image_size = image_size or (32 if small else 224)
    seq_len = seq_len or (8 if small else 32)
    torch.manual_seed(seed)
    model, make_args = _BUILDERS[name](small, image_size, seq_len)
    model.eval()
    if name in CNN_MODELS:
        reinit_cnn(model, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    return model, make_args(batch, gen)


def reinit_cnn(model: Any, *, seed: int = 0) -> None:
    """PyTorch-default init and random BatchNorm statistics, so outputs are O(1)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                m.reset_parameters()
            elif isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)


# ---------------------------------------------------------------------------------------------
# Wrappers: plain tensors in, one tensor out.

def _wrap(model: Any, forward: Callable) -> Any:
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args):  # noqa: D401 - torch API
            return forward(self.model, *args)

    return Wrapped()


def _image_args(size: int):
    def make(batch: int, gen: Any) -> tuple:
        import torch

        return (torch.randn(batch, 3, size, size, generator=gen),)

    return make


def _token_args(seq: int, vocab: int):
    def make(batch: int, gen: Any) -> tuple:
        import torch

        return (torch.randint(0, vocab, (batch, seq), generator=gen),)

    return make


def _resnet50(small: bool, image: int, seq: int):
    from transformers import ResNetConfig, ResNetForImageClassification

    if small:
        cfg = ResNetConfig(embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1], layer_type="bottleneck",
                           num_labels=10)
    else:
        cfg = ResNetConfig(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
                           layer_type="bottleneck", num_labels=1000)
    m = ResNetForImageClassification(cfg)
    return _wrap(m, lambda mm, x: mm(pixel_values=x).logits), _image_args(image)


def _mobilenetv2(small: bool, image: int, seq: int):
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    cfg = MobileNetV2Config(depth_multiplier=0.35 if small else 1.0, image_size=image,
                            num_labels=10 if small else 1000)
    m = MobileNetV2ForImageClassification(cfg)
    return _wrap(m, lambda mm, x: mm(pixel_values=x).logits), _image_args(image)


def _efficientnet_b0(small: bool, image: int, seq: int):
    import torch
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    # EfficientNetConfig() defaults to B7: set B0's coefficients explicitly (FACTS).
    if small:
        cfg = EfficientNetConfig(width_coefficient=0.25, depth_coefficient=0.2, image_size=image,
                                 hidden_dim=320, num_labels=10)  # hidden_dim = round_filters(1280)
    else:
        cfg = EfficientNetConfig(width_coefficient=1.0, depth_coefficient=1.0, image_size=image,
                                 hidden_dim=1280, dropout_rate=0.2, num_labels=1000)
    m = EfficientNetForImageClassification(cfg)
    # HF's pooler is AvgPool2d(hidden_dim, ceil_mode=True): an 8.9 GB padded buffer in TVM.
    m.efficientnet.pooler = torch.nn.AdaptiveAvgPool2d(1)
    return _wrap(m, lambda mm, x: mm(pixel_values=x).logits), _image_args(image)


def _bert_base(small: bool, image: int, seq: int):
    from transformers import BertConfig, BertModel

    if small:
        cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)
    else:
        cfg = BertConfig()  # BERT-base: 12 layers, 768 hidden, 12 heads, 3072 MLP
    m = BertModel(cfg, add_pooling_layer=False)
    return _wrap(m, lambda mm, ids: mm(input_ids=ids).last_hidden_state), _token_args(seq, cfg.vocab_size)


def _causal_lm_forward(mm: Any, ids: Any):
    import torch

    # An explicit mask of ones avoids HF's implicit causal-mask path (bool cumsum; FACTS).
    return mm(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits


def _gpt2(small: bool, image: int, seq: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    if small:
        cfg = GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=1, n_head=2,
                         bos_token_id=0, eos_token_id=0)
    else:
        cfg = GPT2Config()  # GPT-2 124M: 12 layers, 768 hidden, 12 heads
    cfg.use_cache = False
    m = GPT2LMHeadModel(cfg)
    return _wrap(m, _causal_lm_forward), _token_args(seq, cfg.vocab_size)


def _llama7b_layer(small: bool, image: int, seq: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    if small:
        cfg = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    else:  # LLaMA-7B's sizes, one decoder layer (every layer yields the same subgraphs)
        cfg = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=1,
                          num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=2048)
    cfg.use_cache = False
    m = LlamaForCausalLM(cfg)
    return _wrap(m, _causal_lm_forward), _token_args(seq, cfg.vocab_size)


_BUILDERS: dict[str, Callable] = {
    "resnet50": _resnet50,
    "mobilenetv2": _mobilenetv2,
    "efficientnet_b0": _efficientnet_b0,
    "bert_base": _bert_base,
    "gpt2": _gpt2,
    "llama7b_layer": _llama7b_layer,
}
