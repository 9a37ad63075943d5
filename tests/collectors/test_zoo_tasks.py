"""Zoo models (small variants): export, extract tasks, compile end to end equal to PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.compile import compile_and_run
from collectors.tasks import extract_tasks, import_relax, op_kind_of, register_tasks
from collectors.zoo import MODEL_NAMES, build_model


@pytest.mark.slow
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_zoo_model_exports_extracts_and_matches_pytorch(name, cpu_hw):
    import torch

    module, args = build_model(name, small=True)
    with torch.no_grad():
        expected = module(*args).numpy()
    assert np.abs(expected).max() > 1e-3  # meaningful outputs (re-initialised CNNs)
    mod = import_relax(module, args)
    tasks = extract_tasks(name, cpu_hw, relax_mod=mod, small=True)
    assert len(tasks) >= 1
    assert all(len(t.workload_key) == 16 and t.weight >= 1 and t.model == name for t in tasks)
    assert any(t.flops > 0 for t in tasks)
    assert len({t.workload_key for t in tasks}) == len(tasks)
    got = compile_and_run(mod, args)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_zoo_sizes_are_settable():
    _, (x,) = build_model("resnet50", small=True, batch=2, image_size=48)
    assert tuple(x.shape) == (2, 3, 48, 48)
    _, (ids,) = build_model("gpt2", small=True, batch=3, seq_len=5)
    assert tuple(ids.shape) == (3, 5)
    with pytest.raises(ValueError, match="'vgg16'"):
        build_model("vgg16")


def test_user_module_tasks_and_registration(cpu_hw, tmp_path):
    import torch

    from storage import Corpus

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    pair = (Mlp().eval(), (torch.randn(2, 16),))
    tasks = extract_tasks(pair, cpu_hw, model_name="mlp")
    assert {t.op_kind for t in tasks} >= {"matmul"}
    corpus = Corpus.open(tmp_path / "corpus")
    register_tasks(corpus, tasks)
    register_tasks(corpus, tasks)  # idempotent: workloads go in once
    keys = {w["workload_key"] for w in corpus.workloads()}
    assert keys == {t.workload_key for t in tasks}


def test_op_kind_of_names():
    assert op_kind_of("fused_conv2d_add_relu") == "conv2d"
    assert op_kind_of("fused_matmul3_add4") == "matmul"
    assert op_kind_of("softmax") == "softmax"
    assert op_kind_of("fused_layer_norm") == "norm"
    assert op_kind_of("add_relu") == "elementwise"
