"""Exact round trip over real measured records and zoo-model tasks (CPU) and CUDA sketches.

``data/measured_records.json`` holds records measured on a 2-core AMD Zen 4 (``znver4_hw``) by
``collectors.tuner.tune_task`` (evolutionary search, 16 trials, and replay-trace, 8 trials)
for the conftest matmul+ReLU and softmax workloads; evolutionary records include a
MutateParallel rewrite, replay-trace records are stored with dead code removed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.language import assert_round_trip, record_round_trip, sample_traces
from tlm.language import encode

DATA = Path(__file__).parent / "data" / "measured_records.json"


@pytest.fixture(scope="module")
def records(tasks):
    recs = json.loads(DATA.read_text())
    for r in recs:
        assert tasks[r["workload"]].workload_key == r["workload_key"], "test data no longer matches its workload"
    return recs


def test_every_znver4_measured_record_round_trips(records, tasks, znver4_hw):
    assert len(records) >= 10
    for r in records:
        s = record_round_trip(tasks[r["workload"]], znver4_hw, r["trace_json"])
        assert s.sketch_id == r["sketch_id"]


def test_znver4_measured_records_include_mutated_parallel_and_simplified_traces(records, tasks, znver4_hw):
    from tlm.language.space import build_space

    values, simplified = set(), 0
    for r in records:
        task = tasks[r["workload"]]
        s = encode(task, znver4_hw, r["trace_json"])
        i = s.tokens.index("parallel", s.prompt_len)
        values.add(int(s.tokens[i + 1]))
        sk = build_space(task, znver4_hw).sketches[s.sketch_id]
        kinds = [inst[0] for inst in json.loads(r["trace_json"])[0]]
        n = kinds.index("EnterPostproc") if "EnterPostproc" in kinds else len(kinds)
        simplified += n < len(sk.kinds)
    assert values - {32}, "no record with a MutateParallel value: the test data lost its point"
    assert simplified > 0


def test_round_trip_over_a_znver4_corpus(records, tasks, znver4_hw, tmp_path):
    from storage import Corpus

    corpus = Corpus.open(tmp_path / "corpus")
    corpus.register_hardware(znver4_hw.key, target=znver4_hw.target, description="test")
    cols = ("workload_key", "hardware_key", "task_name", "sketch_id", "trace_json", "decisions_json",
            "latency_s", "error", "tuner", "tuner_params", "tvm_version")
    corpus.append([{k: r[k] for k in cols} | {"run_secs": [r["latency_s"]] if r["latency_s"] else []}
                   for r in records])
    by_key = {t.workload_key: t for t in tasks.values()}
    table = corpus.scan()
    assert table.num_rows == len(records)
    for row in table.to_pylist():
        record_round_trip(by_key[row["workload_key"]], znver4_hw, row["trace_json"])


@pytest.mark.slow
def test_round_trip_of_freshly_measured_records(tasks, cpu_hw):
    from collectors.tuner import TuneConfig, tune_task

    task = tasks["matmul"]
    recs: list = []
    tune_task(task, cpu_hw, TuneConfig(trials=4, strategy="replay-trace", seed=7, check_correctness=False),
              on_records=recs.extend)
    assert len(recs) == 4
    for r in recs:
        record_round_trip(task, cpu_hw, r.trace_json)


@pytest.fixture(scope="module")
def zoo_tasks(small_zoo_tasks):
    """A few tasks of each kind from three small zoo models (ResNet-50, BERT, GPT-2)."""
    chosen = []
    for model in ("resnet50", "bert_base", "gpt2"):
        per_kind: dict[str, int] = {}
        for t in small_zoo_tasks[model]:
            if per_kind.get(t.op_kind, 0) < 2:
                per_kind[t.op_kind] = per_kind.get(t.op_kind, 0) + 1
                chosen.append(t)
    return chosen


@pytest.mark.slow
def test_round_trip_over_zoo_model_tasks(zoo_tasks, cpu_hw):
    from tlm.model.tokenizer import build_tokenizer, unknown_words

    tok = build_tokenizer()
    kinds = set()
    for task in zoo_tasks:
        for tr in sample_traces(task, cpu_hw, per_sketch=1):
            s = assert_round_trip(task, cpu_hw, tr)
            assert unknown_words(s.decisions, tok) == []
            kinds.add(task.op_kind)
    assert {"conv2d", "matmul"} <= kinds and len(kinds) >= 4


@pytest.mark.slow
def test_every_sketch_of_all_six_zoo_models_round_trips(cpu_hw, small_zoo_tasks):
    """A task per structure (``one_per_structure``) of the six small zoo families (ResNet-50,
    MobileNetV2, EfficientNet-B0, BERT, GPT-2, LLaMA layer): every sketch, one sampled program
    each, exact round trip."""
    from tlm.language.space import build_space

    from tests.helpers.workloads import one_per_structure

    unique = {t.workload_key: t for tasks in small_zoo_tasks.values() for t in tasks}
    assert len(unique) > 100
    kinds: set = set()
    for task in one_per_structure(list(unique.values())):
        for tr in sample_traces(task, cpu_hw, per_sketch=1, seed=7):
            assert_round_trip(task, cpu_hw, tr)
        kinds |= {c.kind for sk in build_space(task, cpu_hw).sketches for c in sk.choices}
    assert kinds == {"tile", "pick", "at", "parallel"}
