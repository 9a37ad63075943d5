"""Zoo models (small variants): export, extract tasks, compile end to end equal to PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.compile import compile_and_run
from collectors.op_kinds import op_kind_of
from collectors.tasks import COMPILED, extract_tasks, import_relax, register_tasks
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


def test_a_small_zoo_model_is_imported_once_per_process_and_its_tasks_made_anew(cpu_hw, monkeypatch):
    """The second extraction of the same small model (same options) reuses the fused module;
    its Tasks are new objects, so a caller's change (a summed weight) does not leak; other
    options import again."""
    import collectors.tasks as tasks_mod

    imports = []
    real = tasks_mod.import_relax
    monkeypatch.setattr(tasks_mod, "import_relax", lambda *a, **k: imports.append(1) or real(*a, **k))
    monkeypatch.setattr(tasks_mod, "_ZOO_RELAX", type(tasks_mod._ZOO_RELAX)())
    first = extract_tasks("gpt2", cpu_hw, small=True, seq_len=4)
    first[0].weight += 100
    second = extract_tasks("gpt2", cpu_hw, small=True, seq_len=4)
    assert len(imports) == 1
    assert [t.workload_key for t in first] == [t.workload_key for t in second]
    assert second[0] is not first[0] and second[0].weight == first[0].weight - 100
    extract_tasks("gpt2", cpu_hw, small=True, seq_len=6)
    assert len(imports) == 2
    extract_tasks("gpt2", cpu_hw, small=True, seq_len=4, graph=COMPILED)  # another graph: other workloads
    assert len(imports) == 3


def test_the_compiled_graph_folds_the_batch_norms_and_prepacks_the_weights(cpu_hw):
    """``graph=COMPILED`` cuts the tasks ``tlm compile`` builds by default: no batch norm is a task
    of its own, every convolution reads its weight layout-free, and each is another workload than
    the exported graph's; a task that reads no weight (the pooling) keeps its key."""
    from collectors.layout import marks_layout_free

    exported = extract_tasks("resnet50", cpu_hw, small=True)
    compiled = extract_tasks("resnet50", cpu_hw, small=True, graph=COMPILED)
    convs = [t for t in compiled if t.op_kind == "conv2d"]
    assert convs and all(marks_layout_free(t.mod["main"]) for t in convs)
    assert not {t.workload_key for t in convs} & {t.workload_key for t in exported}
    assert any("batch_norm" in t.task_name for t in exported)
    assert not any("batch_norm" in t.task_name for t in compiled)
    weightless = {t.workload_key for t in compiled if not marks_layout_free(t.mod["main"])}
    assert weightless & {t.workload_key for t in exported}


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


def _topi(kind: str):
    """A TOPI subgraph of ``kind`` as a PrimFunc module (what a user posts as TVMScript ``main``)."""
    import tvm
    from tvm import te, topi

    p = te.placeholder
    if kind == "conv1d":
        x, w = p((1, 16, 64), name="x"), p((32, 16, 3), name="w")
        args = [x, w, topi.nn.conv1d_ncw(x, w, 1, 1, 1)]
    elif kind == "conv2d":  # a depthwise one: no reduction over channels, still a convolution
        x, w = p((1, 32, 28, 28), name="x"), p((32, 1, 3, 3), name="w")
        args = [x, w, topi.nn.depthwise_conv2d_nchw(x, w, 1, 1, 1)]
    elif kind == "matmul":
        x, w = p((8, 64), name="x"), p((32, 64), name="w")
        args = [x, w, topi.nn.relu(topi.nn.dense(x, w))]
    elif kind == "norm":
        x, g, b = p((4, 128), name="x"), p((128,), name="g"), p((128,), name="b")
        args = [x, g, b, topi.nn.layer_norm(x, g, b, axis=[1])]
    elif kind == "softmax":
        x = p((4, 100), name="x")
        args = [x, topi.nn.softmax(x)]
    elif kind == "pool":
        x = p((1, 8, 16, 16), name="x")
        args = [x, topi.nn.pool2d(x, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "max")]
    elif kind == "reduction":
        x = p((16, 64), name="x")
        args = [x, topi.sum(x, axis=1)]
    elif kind == "gather":
        x, i = p((100, 16), name="x"), p((8,), name="i", dtype="int32")
        args = [x, i, topi.take(x, i, axis=0)]
    elif kind == "layout":
        x = p((8, 16, 4), name="x")
        args = [x, topi.transpose(x, (2, 0, 1))]
    else:
        x = p((64,), name="x")
        args = [x, topi.nn.relu(topi.exp(x))]
    return tvm.IRModule({"main": te.create_prim_func(args)})


@pytest.mark.parametrize("kind", ["conv1d", "conv2d", "matmul", "norm", "softmax", "pool", "reduction", "gather",
                                  "layout", "elementwise"])
def test_a_posted_subgraph_is_read_for_what_it_is(kind):
    """Named ``main`` (nothing to read in the name), each TOPI op gets its kind from its program
    (they all came out ``elementwise`` before: issue 33)."""
    from collectors.op_kinds import program_op_kind

    mod = _topi(kind)
    assert program_op_kind(mod) == kind
    assert op_kind_of("main", mod) == op_kind_of("user_task", mod) == kind


def test_an_informative_name_keeps_its_kind_and_the_program_speaks_for_the_rest():
    """The zoo's names keep their kinds (the op kind is a prompt word the shipped models read)."""
    assert op_kind_of("fused_batch_norm2_add_relu2", _topi("elementwise")) == "norm"
    assert op_kind_of("add_relu", _topi("softmax")) == "softmax"


def test_folding_batch_norm_removes_its_task_and_keeps_the_answer(cpu_hw):
    """``import_relax(..., fold_batch_norm=True)`` (``tlm compile``'s default): a convolution's
    inference batch norm (running statistics far from 0 and 1) is folded into it, so no task
    computes it, and the build still equals PyTorch."""
    import torch

    torch.manual_seed(0)
    conv, bn = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    module = torch.nn.Sequential(conv, bn, torch.nn.ReLU6()).eval()
    args = (torch.randn(1, 3, 16, 16),)
    with torch.no_grad():
        expected = module(*args).numpy()
    kinds = {}
    for fold in (False, True):
        mod = import_relax(module, args, fold_batch_norm=fold)
        kinds[fold] = sorted(t.op_kind for t in extract_tasks((module, args), cpu_hw, model_name="m", relax_mod=mod))
        np.testing.assert_allclose(compile_and_run(mod, args), expected, rtol=1e-4, atol=1e-5)
    assert "norm" in kinds[False] and kinds[True] == ["conv2d"]
