"""Every record of a collected corpus of several zoo models round-trips exactly.

``data/zoo_corpus.json.gz`` is a real collection (``collectors.collect.collect``, evolutionary
search, 8 trials per task) of a few tasks of each op kind from small ResNet-50, BERT and GPT-2
on this project's CPU machine: the workloads (TVMScript + the models they occur in) and every
record. Tasks are rebuilt from the TVMScript exactly as ``tlm dataset build`` does.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.helpers.language import record_round_trip
from tlm.model.dataset import DatasetConfig, build_datasets, load_hardware, load_tasks

DATA = Path(__file__).parent / "data" / "zoo_corpus.json.gz"


def test_the_zoo_corpus_test_data_is_there():
    assert DATA.exists(), f"{DATA} is missing (checked-in test data: git checkout -- {DATA.name})"


@pytest.fixture(scope="module")
def zoo_corpus(tmp_path_factory):
    from storage import Corpus

    data = json.loads(gzip.decompress(DATA.read_bytes()))
    c = Corpus.open(tmp_path_factory.mktemp("zoo"))
    for h in data["hardware"]:
        c.register_hardware(h["key"], target=h["target"], description=h["description"])
    for w in data["workloads"]:
        c.register_workload(w["workload_key"], task_name=w["task_name"], tvmscript=w["tvmscript"],
                            op_kind=w["op_kind"])
        for model, weight in w["models"].items():
            c.register_workload_model(w["workload_key"], model=model, weight=weight)
    c.append(data["records"])
    yield c, data
    c.close()


@pytest.mark.slow
def test_every_record_of_the_zoo_corpus_round_trips(zoo_corpus):
    corpus, data = zoo_corpus
    tasks = load_tasks(corpus)
    hardware = load_hardware(corpus, [h["key"] for h in data["hardware"]])
    table = corpus.scan()
    assert table.num_rows == len(data["records"]) > 0
    kinds, models = set(), set()
    for row in table.to_pylist():
        task, task_models = tasks[row["workload_key"]]
        s = record_round_trip(task, hardware[row["hardware_key"]], row["trace_json"])
        assert s.sketch_id == row["sketch_id"]
        kinds.add(task.op_kind)
        models.update(task_models)
    assert len(models) >= 2 and len(kinds) >= 3


@pytest.mark.slow
def test_zoo_corpus_dataset_holds_out_a_whole_model(zoo_corpus, tmp_path):
    import pyarrow.parquet as pq

    corpus, data = zoo_corpus
    held = "gpt2"
    build_datasets(corpus, str(tmp_path / "ds"), DatasetConfig(pretrain_per_sketch=1, finetune_top_k=1,
                                                               held_out_models=(held,)), progress=False)
    in_held = {w["workload_key"] for w in data["workloads"] if held in w["models"]}
    rows = pq.read_table(tmp_path / "ds" / "finetune.parquet").to_pylist()
    assert rows
    for r in rows:
        assert r["split"] == ("test" if r["workload_key"] in in_held else "train")
