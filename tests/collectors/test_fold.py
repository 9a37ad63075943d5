"""Batch norms folded into their convolutions on the PyTorch side (``collectors.fold``)."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.compile import compile_and_run
from collectors.fold import fold_conv_batch_norm
from collectors.tasks import import_relax


def _bn(channels: int):
    import torch

    bn = torch.nn.BatchNorm2d(channels)
    with torch.no_grad():  # statistics far from 0 and 1, so a fold that skips them is visible
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    return bn


def _run(module, args):
    import torch

    with torch.no_grad():
        return module(*args).numpy()


class _Branching:
    """A convolution whose output feeds its batch norm and a skip connection: folding would
    change the skip's value, so it must not fold; a batch norm on the input has no conv."""

    @staticmethod
    def build():
        import torch

        class Net(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.pre = _bn(3)
                self.conv, self.bn = torch.nn.Conv2d(3, 3, 3, padding=1), _bn(3)

            def forward(self, x):
                y = self.conv(self.pre(x))
                return self.bn(y) + y

        return Net().eval()


def test_folding_keeps_the_users_module_and_its_answer():
    """Two conv + batch-norm pairs (one conv with a bias, one with ``padding="same"``, the
    ``aten.conv2d.padding`` overload EfficientNet exports) fold; the caller's module is
    unchanged and the folded copy computes the same."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=True), _bn(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, padding="same", bias=False), _bn(4)).eval()
    args = (torch.randn(1, 3, 12, 12),)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    expected = _run(module, args)
    folded, exported, count = fold_conv_batch_norm(module, args)
    assert count == 2
    assert not any("batch_norm" in str(n.target) for n in exported.graph.nodes)
    assert all(torch.equal(v, before[k]) for k, v in module.state_dict().items())
    assert isinstance(module[1], torch.nn.BatchNorm2d)
    np.testing.assert_allclose(_run(folded, args), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fold", [False, True])
def test_a_batch_norm_that_cannot_fold_stays_and_the_build_is_right(fold):
    """A conv with a second user and a batch norm with no conv before it are left to TVM's
    path; ``import_relax`` still builds what PyTorch computes."""
    import torch

    torch.manual_seed(1)
    module, args = _Branching.build(), (torch.randn(1, 3, 10, 10),)
    _, _, count = fold_conv_batch_norm(module, args)
    assert count == 0
    np.testing.assert_allclose(compile_and_run(import_relax(module, args, fold_batch_norm=fold), args),
                               _run(module, args), rtol=1e-4, atol=1e-5)
