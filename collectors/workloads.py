"""Small hand-made workloads (TE → PrimFunc) for tests, benchmarks and quick experiments.

TVMScript ``@T.prim_func`` with ``T.block`` does not parse in TVM 0.27, so these are built with
``te.create_prim_func``. Each returns an IRModule with one ``main`` PrimFunc.
"""
from __future__ import annotations

from typing import Any


def matmul(n: int = 64, m: int = 64, k: int = 64, dtype: str = "float32") -> Any:
    """C[n, m] = A[n, k] @ B[k, m]."""
    import tvm
    from tvm import te

    a = te.placeholder((n, k), name="A", dtype=dtype)
    b = te.placeholder((k, m), name="B", dtype=dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def relu(n: int = 1024, dtype: str = "float32") -> Any:
    """B = max(A, 0) on a vector."""
    import tvm
    from tvm import te

    a = te.placeholder((n,), name="A", dtype=dtype)
    b = te.compute((n,), lambda i: te.max(a[i], tvm.tirx.const(0, dtype)), name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})
