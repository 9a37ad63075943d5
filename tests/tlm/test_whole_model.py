"""A whole model's schedules at budget 0 (``tlm.service.whole_model.schedule_tasks``): which tasks keep
TVM's default lowering without asking the model, and why."""
from __future__ import annotations

from tests.helpers.corpora import fixed_cpu
from tests.helpers.workloads import make_task, matmul, relu
from tlm.service.whole_model import Proposal, schedule_tasks


def test_a_tiny_untiled_task_keeps_the_default_lowering_and_says_why():
    """A 256-element relu costs less than starting a parallel region, and every sketch of it is
    parallelized by MetaSchedule's postproc: the default (serial) lowering is kept and the model
    is not asked. A 4M-element relu and a tiny matmul (whose tiles healthy decoding writes
    serial) are asked."""
    hw = fixed_cpu("znver3")
    tasks = [make_task(relu(256), "relu_tiny", "elementwise"), make_task(relu(1 << 22), "relu_big", "elementwise"),
             make_task(matmul(8, 64, 32), "matmul_tiny", "matmul")]
    asked = []

    def source(task, k):
        asked.append(task.task_name)
        return Proposal([["a trace"]], "test-model", 0.0)

    out = {ts.task.task_name: ts for ts in schedule_tasks(tasks, hw, source)}
    assert asked == ["relu_big", "matmul_tiny"]
    tiny = out["relu_tiny"]
    assert tiny.source == "default" and tiny.trace is None and tiny.error.startswith("tiny:")
    assert out["relu_big"].source == out["matmul_tiny"].source == "model"
