"""Small hand-made workloads for the tests (TE -> PrimFunc; TVMScript ``@T.prim_func`` with
``T.block`` does not parse in TVM 0.27, so modules are built with ``te.create_prim_func``). Each
returns an IRModule with one ``main`` PrimFunc; :func:`make_task` makes a Task of one.

They cover what CPU sketches sample: multi-level tiling (matmul, conv2d: perfect tiles, unroll
categorical, parallel annotation) and fused reductions (softmax: compute locations).
"""
from __future__ import annotations

from typing import Any


#: set to 1 to run the zoo-wide tests over every task instead of one task per structure
EVERY_TASK_ENV = "TLM_TEST_EVERY_TASK"


def one_per_structure(tasks: list) -> list:
    """The first task of each distinct *structure*: its TVMScript with every number replaced, so
    tasks that differ only in shapes (``conv2d0``..``conv2d48`` of one kind) count once, while a
    strided, depthwise or padded variant is a structure of its own. The zoo-wide tests run these
    (~1/4 of the zoo, every operator and fusion); ``TLM_TEST_EVERY_TASK=1`` runs them all."""
    import os
    import re

    if os.environ.get(EVERY_TASK_ENV) == "1":
        return list(tasks)
    seen: dict[str, Any] = {}
    for t in tasks:
        seen.setdefault(re.sub(r"\d+", "N", t.tvmscript), t)
    return list(seen.values())


def make_task(mod, name: str, op_kind: str):
    from collectors.tasks import Task
    from collectors.tir import workload_key

    return Task(workload_key=workload_key(mod), task_name=name, mod=mod, op_kind=op_kind)


def matmul(n: int = 64, m: int = 64, k: int = 64, dtype: str = "float32", *, transpose_b: bool = False) -> Any:
    """C[n, m] = A[n, k] @ B[k, m]; with ``transpose_b``, A[n, k] @ B[m, k]^T: the same shape and
    iterators, B read along k."""
    import tvm
    from tvm import te

    a = te.placeholder((n, k), name="A", dtype=dtype)
    b = te.placeholder((m, k) if transpose_b else (k, m), name="B", dtype=dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * (b[j, r] if transpose_b else b[r, j]), axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def batch_matmul(b: int = 12, n: int = 64, m: int = 64, k: int = 64) -> Any:
    """C[b, n, m] = A[b, n, k] @ B[b, k, m] (attention's heads): b indexes both inputs."""
    import tvm
    from tvm import te

    x = te.placeholder((b, n, k), name="A")
    y = te.placeholder((b, k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((b, n, m), lambda h, i, j: te.sum(x[h, i, r] * y[h, r, j], axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([x, y, c])})


def relu(n: int = 1024, dtype: str = "float32") -> Any:
    """B = max(A, 0) on a vector."""
    import tvm
    from tvm import te

    a = te.placeholder((n,), name="A", dtype=dtype)
    b = te.compute((n,), lambda i: te.max(a[i], tvm.tirx.const(0, dtype)), name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def matmul_relu_mod(m: int = 64, n: int = 96, k: int = 128):
    import tvm
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: te.max(c[i, j], tvm.tirx.const(0, "float32")), name="D")
    return tvm.IRModule({"main": te.create_prim_func([a, b, d])})


def softmax_mod(m: int = 8, n: int = 100):
    import tvm
    from tvm import te

    a = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    mx = te.compute((m,), lambda i: te.max(a[i, k], axis=k), name="row_max")
    e = te.compute((m, n), lambda i, j: te.exp(a[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, n), name="k2")
    s = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    o = te.compute((m, n), lambda i, j: e[i, j] / s[i], name="softmax")
    return tvm.IRModule({"main": te.create_prim_func([a, o])})


def reshape_split_mod():
    """A reshape read by three splits: on CUDA, AutoInline reverse-inlines the reshape into one
    split and leaves the others reading a buffer nobody allocates (a sketch with no valid program)."""
    import tvm
    from tvm import te

    a = te.placeholder((8, 96), name="A")
    r = te.compute((1, 8, 96), lambda z, i, j: a[i, j], name="T_reshape")

    def part(k: int):
        return te.compute((1, 8, 32), lambda z, i, j: r[z, i, j + 32 * k], name=f"T_split{k}")

    return tvm.IRModule({"main": te.create_prim_func([a, part(0), part(1), part(2)])})


def conv_mod(c: int = 8, hw: int = 14, f: int = 16):
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, c, hw, hw), name="X")
    w = te.placeholder((f, c, 3, 3), name="W")
    y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def pointwise_conv_mod(c: int = 96, hw: int = 7, f: int = 32):
    """A 1x1 NCHW convolution of stride 1 (no pad), as TOPI writes it (MobileNetV2's projections)."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, c, hw, hw), name="X")
    w = te.placeholder((f, c, 1, 1), name="W")
    y = topi.nn.conv2d_nchw(x, w, 1, 0, 1)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def depthwise_conv_mod(c: int = 16, hw: int = 16, k: int = 5, stride: int = 2):
    """A depthwise (one filter per channel) NCHW convolution, padded by ``k // 2``, as TOPI writes it."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, c, hw, hw), name="X")
    w = te.placeholder((c, 1, k, k), name="W")
    y = topi.nn.depthwise_conv2d_nchw(x, w, stride, k // 2, 1)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y])})


def matmul_tvmscript(m: int = 64, n: int = 64, k: int = 64, name: str = "mm") -> str:
    """A user's matmul PrimFunc as TVMScript text, as a client of the schedule server sends it."""
    return f'''from tvm.script import tirx as T

@T.prim_func(s_tir=True)
def {name}(A: T.Buffer(({m}, {k}), "float32"), B: T.Buffer(({k}, {n}), "float32"), C: T.Buffer(({m}, {n}), "float32")):
    T.func_attr({{"tirx.noalias": True}})
    for i, j, r in T.grid({m}, {n}, {k}):
        with T.sblock("C"):
            vi, vj, vr = T.axis.remap("SSR", [i, j, r])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vr] * B[vr, vj]
'''
