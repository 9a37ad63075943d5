"""A corpus of records measured on a fixed 2-core Zen 4 for the small matmul and softmax tasks
(encode, decode and lower only: running Zen 4 code could be an illegal instruction here), and
the sentence sets ``tlm dataset build`` writes from it."""
from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.workloads import make_task, matmul_relu_mod, softmax_mod

#: Records measured on a 2-core Zen 4 for the small matmul and softmax tasks (encode/lower only).
MEASURED_RECORDS = Path(__file__).resolve().parents[1] / "tlm" / "data" / "measured_records.json"


def measured_corpus(root, tasks, hw, models=(("matmul", "model_a"), ("softmax", "model_b"))):
    """A corpus at ``root`` holding :data:`MEASURED_RECORDS` on ``hw``; each task of ``models``
    (task name, model) is registered as a workload of that model. The caller closes it."""
    from storage import Corpus

    c = Corpus.open(root)
    c.register_hardware(hw.key, target=hw.target, description="test CPU")
    for name, model in models:
        t = tasks[name]
        c.register_workload(t.workload_key, task_name=t.task_name, tvmscript=t.tvmscript, op_kind=t.op_kind)
        c.register_workload_model(t.workload_key, model=model, weight=1)
    cols = ("workload_key", "hardware_key", "task_name", "sketch_id", "trace_json", "decisions_json",
            "latency_s", "error", "tuner", "tuner_params", "tvm_version")
    recs = json.loads(MEASURED_RECORDS.read_text())
    c.append([{k: r[k] for k in cols} | {"run_secs": [r["latency_s"]]} for r in recs])
    return c


def small_tasks() -> dict:
    """The matmul and softmax Tasks of :data:`MEASURED_RECORDS` (the conftest's ``tasks`` subset)."""
    return {"matmul": make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul"),
            "softmax": make_task(softmax_mod(), "fused_softmax", "reduction")}


def fixed_cpu(mcpu: str) -> object:
    """A fixed 2-core CPU of LLVM's ``mcpu`` (key ``cpu-<mcpu>-2c``), whatever CPU runs the tests:
    for encoding, decoding, lowering and the rules' decisions only, never for running its code."""
    from collectors.hardware import hardware_from_index

    return hardware_from_index(f"cpu-{mcpu}-2c", {"kind": "llvm", "mcpu": mcpu, "num-cores": 2}, "test CPU")


def znver4() -> object:
    """The fixed 2-core Zen 4 of :data:`MEASURED_RECORDS` (encode, decode, lower only)."""
    return fixed_cpu("znver4")


def sentence_sets(tmp_root, *, per_sketch: int = 4, top_k: int = 4, language: int = 1):
    """``(dataset_dir, corpus_root)``: sentence sets built from :func:`measured_corpus` (model_b,
    the softmax, held out), as `tlm dataset build` writes them, in prompt grammar ``language``."""
    from tlm.model.dataset import DatasetConfig, build_datasets

    root, out = Path(tmp_root) / "corpus", Path(tmp_root) / "sets"
    c = measured_corpus(root, small_tasks(), znver4())
    try:
        build_datasets(c, str(out), DatasetConfig(pretrain_per_sketch=per_sketch, finetune_top_k=top_k,
                                                  held_out_models=("model_b",), language=language),
                       progress=False)
    finally:
        c.close()
    return out, root
