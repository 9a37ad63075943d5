"""A deployer's linear layers with a ragged output axis computed padded to whole vectors."""
from __future__ import annotations

import pytest

from collectors.padding import pad_ragged_linears, padded_columns, padded_rows


@pytest.mark.parametrize("n, padded", [(50257, 50304), (1000, 1024), (1024, 1024), (3072, 3072), (10, 10),
                                       (100, 100), (1001, 1024)])
def test_ragged_columns_are_padded_to_whole_vectors_only_where_it_costs_little(n, padded):
    assert padded_columns(n) == padded


@pytest.mark.parametrize("m, padded", [(197, 200), (128, 128), (1, 1), (7, 7), (100, 104), (50, 50)])
def test_ragged_rows_are_padded_to_whole_register_tiles_only_where_it_costs_little(m, padded):
    assert padded_rows(m) == padded


def _net():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 10)).eval()


def test_padded_layers_give_the_same_outputs_share_the_parameters_and_leave_the_module_as_it_was():
    import torch

    net = _net()
    padded = pad_ragged_linears(net)
    assert padded is not net and isinstance(net[0], torch.nn.Linear) and net[0].weight.shape == (1000, 32)
    assert padded[0].weight.shape == (1024, 32)  # the ragged columns, padded once
    assert padded[2].weight is net[2].weight and padded[0].bias is not net[0].bias
    for rows in (4, 197):  # 197 rows computed as 200
        x = torch.randn(rows, 32)
        torch.testing.assert_close(padded(x), net(x))
        torch.testing.assert_close(padded(x[None]), net(x[None]))
    convs = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 3))
    assert pad_ragged_linears(convs) is convs


@pytest.mark.slow
def test_a_prepacked_import_computes_the_padded_extent_and_matches_pytorch(cpu_hw):
    """The 1,000-wide layer is a 1,024-wide matmul (its weight layout-free, so padded once at
    compile time) whose task slices the first 1,000 columns out, and 197 rows are computed as 200;
    built with the rules' schedules, the model answers as PyTorch does."""
    import torch

    from collectors.compile import check_against_torch, compile_model
    from collectors.layout import marks_layout_free
    from collectors.rules import rule_schedule
    from collectors.tasks import extract_tasks, import_relax
    from collectors.tir import plain_json
    from tlm.service.whole_model import TaskSchedule, database_of

    net, args = _net(), (torch.randn(197, 32),)
    mod = import_relax(net, args, prepack_weights=True)
    tasks = extract_tasks((net, args), cpu_hw, model_name="net", relax_mod=mod)
    wide = [t for t in tasks if [32, 1024] in [[int(d) for d in b.shape] for b in t.mod["main"].params]]
    assert len(wide) == 1 and marks_layout_free(wide[0].mod["main"])
    assert [int(d) for d in wide[0].mod["main"].params[-1].shape][-1] == 1000  # the slice in the same task
    assert any("pad" in t.task_name for t in tasks)  # the rows
    schedules = [(t, rule_schedule(t, cpu_hw)) for t in tasks]
    db = database_of([TaskSchedule(task=t, trace=plain_json(r.schedule.trace.as_json()))
                      for t, r in schedules if r is not None], cpu_hw)
    err, correct = check_against_torch(compile_model(mod, cpu_hw, db), net, args, cpu_hw)
    assert correct, err
