"""A whole model compiled with a database of schedules is built with them (collectors/compile.py):
every task whose schedule the database holds, the fused ones too. BERT-base at sequence 128
built from served schedules ran 31.4 s a run, exactly as slow as TVM's untuned build: the
schedules of its 14 fused tasks were never found (``compile_relax`` annotates ``op_pattern``
before its lookup, the tasks carry none)."""
from __future__ import annotations


def test_every_task_with_a_schedule_is_built_with_it(cpu_hw):
    import torch

    from collectors.compile import compile_and_run, scheduled_functions
    from collectors.rules import rule_schedule
    from collectors.tasks import extract_tasks, import_relax
    from tlm.service.whole_model import TaskSchedule, database_of
    from collectors.tir import plain_json

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    args = (torch.randn(8, 32),)
    relax_mod = import_relax(module, args)
    tasks = extract_tasks((module, args), cpu_hw, model_name="mlp", relax_mod=relax_mod)
    assert any(t.task_name.startswith("fused_") for t in tasks)
    chosen = [TaskSchedule(task=t, trace=plain_json(rule_schedule(t, cpu_hw).schedule.trace.as_json())) for t in tasks]
    db = database_of(chosen, cpu_hw)
    assert scheduled_functions(relax_mod, cpu_hw, db) == {t.task_name for t in tasks}
    with torch.no_grad():
        want = module(*args).numpy()
    got = compile_and_run(relax_mod, args, cpu_hw, db)
    assert abs(got - want).max() < 1e-4
