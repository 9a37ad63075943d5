"""Folding inference batch norms into the convolutions before them, on the PyTorch side.

Why here and not in TVM: Relax's ``FoldBatchnormToConv2D`` leaves each folded weight as a
constant expression that ``FoldConstant`` then builds and runs through the VM one at a time,
13 s of the 22 s a full-size MobileNetV2 took to compile with served schedules (2 cores, Rocket
Lake). Here the pairs are found in the exported ATen graph (``aten.conv{1,2}d`` whose only user
is an inference ``aten.batch_norm``), their weights folded with PyTorch's own
``fuse_conv_bn_weights`` on a copy of the module, the batch norms replaced by identities, and the
copy exported again: milliseconds of tensor arithmetic instead of a compile per constant.

A batch norm this cannot fold (not after a convolution, a convolution with another user, a
module called twice) stays in the graph for ``collectors.tasks.import_relax``'s TVM fallback.
"""
from __future__ import annotations

import copy
from collections import Counter
from typing import Any, Sequence

_CONVS = ("aten.conv1d", "aten.conv2d", "aten.conv3d")  # any overload: .default, .padding ("same")
_BATCH_NORM = "aten.batch_norm.default"


def export(module: Any, args: Sequence[Any]) -> Any:
    """``torch.export`` of ``module`` in eval mode without autograd (what ``import_relax`` reads)."""
    import torch

    with torch.no_grad():
        return torch.export.export(module.eval(), tuple(args))


def fold_conv_batch_norm(module: Any, args: Sequence[Any]) -> tuple[Any, Any, int]:
    """(folded copy of ``module``, its exported program, batch norms folded).

    ``module`` itself is never changed (a deployer's compile checks its build against it).
    With nothing to fold, the module and its first export come back as they are."""
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.modules.conv import _ConvNd
    from torch.nn.utils.fusion import fuse_conv_bn_weights

    exported = export(module, args)
    # a module's own conv and batch norm, so that what forward calls is what gets folded
    pairs = [(c, b) for c, b in _foldable_pairs(exported)
             if isinstance(module.get_submodule(c), _ConvNd) and isinstance(module.get_submodule(b), _BatchNorm)]
    if not pairs:
        return module, exported, 0
    try:
        folded = copy.deepcopy(module)
    except (TypeError, RuntimeError, copy.Error):  # a module that cannot be copied: TVM's fold after import
        return module, exported, 0
    for conv_name, bn in pairs:
        conv, norm = folded.get_submodule(conv_name), folded.get_submodule(bn)
        weight, bias = fuse_conv_bn_weights(
            conv.weight, conv.bias, norm.running_mean, norm.running_var, norm.eps, norm.weight, norm.bias)
        conv.weight, conv.bias = weight, bias
        parent, _, name = bn.rpartition(".")
        setattr(folded.get_submodule(parent) if parent else folded, name, _identity())
    return folded, export(folded, args), len(pairs)


def _identity() -> Any:
    import torch

    return torch.nn.Identity()


def _foldable_pairs(exported: Any) -> list[tuple[str, str]]:
    """(convolution module FQN, batch-norm module FQN) for each foldable pair.

    A pair folds when the convolution's only user is an inference batch norm whose statistics
    and affine parameters are the module's own, and neither module's parameters are used by any
    other node (a shared convolution or a batch norm called twice would change elsewhere)."""
    signature = exported.graph_signature
    params, buffers = signature.inputs_to_parameters, signature.inputs_to_buffers
    uses = Counter(a.name for node in exported.graph.nodes if node.op == "call_function"
                   for a in node.args if hasattr(a, "name"))
    pairs = []
    for node in exported.graph.nodes:
        if node.op != "call_function" or str(node.target) != _BATCH_NORM:
            continue
        source, weight, bias, mean, var, training = node.args[:6]
        if training or not hasattr(source, "target") or str(source.target).rsplit(".", 1)[0] not in _CONVS:
            continue
        if len(source.users) != 1:
            continue
        conv_w = source.args[1]
        conv_b = source.args[2] if len(source.args) > 2 else None
        if getattr(conv_w, "name", None) not in params or (conv_b is not None and getattr(conv_b, "name", None) not in params):
            continue
        if getattr(mean, "name", None) not in buffers or getattr(var, "name", None) not in buffers:
            continue
        owned = [a for a in (conv_w, conv_b, weight, bias, mean, var) if a is not None]
        if any(uses[a.name] != 1 for a in owned):
            continue
        bn = buffers[mean.name].rsplit(".", 1)[0]
        if any(buffers.get(a.name, params.get(a.name, "")).rsplit(".", 1)[0] != bn
               for a in (weight, bias, var) if a is not None):
            continue
        conv, _, attr = params[conv_w.name].rpartition(".")
        if attr != "weight" or (conv_b is not None and params[conv_b.name] != f"{conv}.bias"):
            continue
        pairs.append((conv, bn))
    return pairs
