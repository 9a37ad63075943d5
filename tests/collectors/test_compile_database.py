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


def test_prepacked_weights_are_rewritten_once_at_compile_time_and_the_answer_holds(cpu_hw):
    """``import_relax(..., prepack_weights=True)`` (``tlm compile``'s default): the weights are
    layout-free, so the rules' schedule of a dense reads its weight in the layout its tiles walk;
    the build rewrites each weight once, at compile time: the model calls the packed kernels on
    constants already rewritten, never a rewrite (BERT-base 1.15x, Rocket Lake). A task that reads
    no weight (the softmax) stays the workload the corpus measured."""
    import tvm
    import torch

    from collectors.compile import compile_and_run, has_layout_free_weights, prepacked
    from collectors.layout import layout_rewrites, unpacked_keys
    from collectors.rules import rule_schedule
    from collectors.tasks import extract_tasks, import_relax
    from collectors.tir import plain_json
    from tlm.service.whole_model import TaskSchedule, database_of

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16),
                                 torch.nn.Softmax(-1)).eval()
    args = (torch.randn(8, 32),)
    plain, packed = import_relax(module, args), import_relax(module, args, prepack_weights=True)
    assert has_layout_free_weights(packed) and not has_layout_free_weights(plain)
    tasks = extract_tasks((module, args), cpu_hw, model_name="mlp", relax_mod=packed)
    plain_keys = {t.workload_key for t in extract_tasks((module, args), cpu_hw, model_name="mlp", relax_mod=plain)}
    dense = {t.task_name for t in tasks if t.op_kind == "matmul"}
    assert len(dense) == 2 and len(tasks) == 3
    assert {t.task_name for t in tasks if t.workload_key in plain_keys} == {t.task_name for t in tasks} - dense
    # each packed task, without its layout freedom, is the workload `tlm collect` measures
    assert set(unpacked_keys(tasks)) == plain_keys - {t.workload_key for t in tasks}
    schedules = [rule_schedule(t, cpu_hw).schedule for t in tasks]
    assert {t.task_name for t, s in zip(tasks, schedules) if layout_rewrites(s.mod)} == dense
    db = database_of([TaskSchedule(task=t, trace=plain_json(s.trace.as_json())) for t, s in zip(tasks, schedules)],
                     cpu_hw)
    built = prepacked(packed, cpu_hw, db)
    called = {c.args[0].name_hint for c in _calls(built["main"]) if c.op.name == "relax.call_tir"}
    # the packed kernels and the softmax; no weight rewrite left to run, nor in the module
    assert called == {f"{n}_prepacked" for n in dense} | {t.task_name for t in tasks if t.task_name not in dense}
    assert {gv.name_hint for gv, f in built.functions.items() if isinstance(f, tvm.tirx.PrimFunc)} == called
    with torch.no_grad():
        want = module(*args).numpy()
    assert abs(compile_and_run(packed, args, cpu_hw, db) - want).max() < 1e-4


def _calls(func):
    """Every Relax call in ``func``."""
    from tvm import relax

    found = []
    relax.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(e, relax.Call) else None)
    return found
