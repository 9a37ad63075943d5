"""A workload key names one module: the first one registered, block names included.

The key is a structural hash, which ignores block and buffer names, while a trace finds its
blocks by name. The same subgraph from two models (BERT's ``lv63_red`` and GPT-2's
``lv67_red``) has one key, so records of that key must all be tuned on one module, or a trace
stored under the key would not apply to the module stored under it.
"""
from __future__ import annotations


def _named_matmul(name: str):
    import tvm
    from tvm import te

    a = te.placeholder((32, 32), name="A")
    b = te.placeholder((32, 32), name="B")
    r = te.reduce_axis((0, 32), name="k")
    c = te.compute((32, 32), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name=name)
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def test_same_key_other_names_is_tuned_on_the_first_registered_module(tmp_path):
    import tvm_ffi

    from collectors.tasks import Task
    from collectors.tasks import register_tasks
    from collectors.tir import workload_key
    from storage import Corpus

    first, second = _named_matmul("C_first"), _named_matmul("C_second")
    key = workload_key(first)
    assert workload_key(second) == key, "the premise: names do not change the key"
    corpus = Corpus.open(tmp_path / "corpus")
    t1 = Task(key, "matmul", first, model="bert")
    t2 = Task(key, "matmul", second, model="gpt2")
    register_tasks(corpus, [t1])
    register_tasks(corpus, [t2])
    stored = corpus.workload(key)
    assert "C_first" in stored["tvmscript"] and "C_second" not in stored["tvmscript"]
    assert stored["mod_json"], "the exact module is stored, not only its TVMScript"
    assert "C_first" in t2.mod.script(), "the second copy is tuned on the registered module"
    assert tvm_ffi.structural_equal(t2.mod, first, map_free_vars=True)
    assert set(corpus.workloads()[0]["models"]) == {"bert", "gpt2"}
