"""A task: one subgraph (a PrimFunc) to schedule, identified by its workload key."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Task:
    """One tuning task, as extracted from a model (or handed in by a user).

    ``mod`` is the IRModule MetaSchedule tunes (a single ``main`` PrimFunc); its workload key
    is ``storage.workload_key(mod)``, a structural hash, so the same subgraph from two models
    is one task.
    """

    workload_key: str  # structural hash of ``mod`` as 16 hex digits
    task_name: str  # MetaSchedule's task name, e.g. "fused_matmul_add"
    mod: Any  # tvm.IRModule with one PrimFunc named "main"
    weight: int = 1  # how often the subgraph occurs in the model
    flops: float = 0.0  # floating-point operations of one run
    op_kind: str = ""  # coarse kind: "matmul", "conv2d", "elementwise", "reduction", ...
    model: str = ""  # model it came from ("" for a user task); held-out splits use it

    @property
    def tvmscript(self) -> str:
        """The PrimFunc as TVMScript text, as stored once in the index's workloads table."""
        return self.mod.script()
