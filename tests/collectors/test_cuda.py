"""The CUDA path on a GPU: tuning stores checked records. (CUDA sketches built without a GPU are
tested in tests/tlm/test_gpu.py, the one file that pays the CUDA intrinsics import.)"""
from __future__ import annotations

import pytest

from collectors.hardware import Hardware, cuda_available

H200_LIKE = Hardware(key="cuda-sm_90-h200", kind="cuda", arch="sm_90", cores=132, vector_bits=1024,
                     target={"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                             "max_shared_memory_per_block": 49152, "thread_warp_size": 32})

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU (TVM sees none on this machine)")


@pytest.mark.gpu
@needs_gpu
def test_tune_matmul_on_the_gpu_stores_checked_records():
    from collectors.hardware import detect_hardware
    from collectors.tasks import Task
    from collectors.tuner import TuneConfig, tune_task
    from tests.helpers.workloads import matmul

    hw = detect_hardware("cuda")
    assert hw.key.startswith("cuda-sm_")
    records: list = []
    summary = tune_task(Task("ef" * 8, "matmul256", matmul(256, 256, 256)), hw,
                        TuneConfig(trials=8, strategy="evolutionary"), on_records=records.extend)
    assert len(records) == 8 == summary.records
    assert summary.wrong_answers == 0
    assert summary.best_latency_s is not None and summary.best_latency_s > 0
    assert all(r.hardware_key == hw.key and '"Bind"' in r.trace_json for r in records)
