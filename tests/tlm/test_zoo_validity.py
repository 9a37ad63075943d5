"""Every task of every zoo model gets valid schedules from the generator, for k = 1 and k = 4.

The tasks are the workloads of the shipped corpus's index (all six zoo models at the seed's
shapes), rebuilt from their TVMScript as a server would. The writer is a tiny random GPT-2,
the hardest case for validity: it prefers nothing, so only the constrained decoder stands
between it and an invalid program; ``generate`` proves each candidate (replay without repair,
every postprocessor) and raises otherwise. Programs are for this host and only checked here.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tlm.service.generator import generate
from tlm.model.network import build_model, model_config
from tlm.model.tokenizer import build_tokenizer
from tests.helpers.workloads import one_per_structure

pytestmark = pytest.mark.slow  # a task per structure of six models: ~1 minute

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"


@pytest.fixture(scope="module")
def zoo_tasks():
    from collectors.tasks import task_from_index
    from storage import Corpus

    with Corpus.open(str(CORPUS)) as corpus:
        rows = corpus.workloads()
    return one_per_structure([task_from_index(w) for w in rows])


def test_every_zoo_task_gets_valid_schedules(zoo_tasks, cpu_hw):
    tok = build_tokenizer()
    model = build_model(model_config("tiny", tok, 1000), seed=0).eval()
    models = set()
    for task in zoo_tasks:
        for k in (1, 4):
            g = generate(task, cpu_hw, model, tok, k=k)
            assert 1 <= len(g.candidates) <= k, task.task_name
            assert all(c.schedule is not None for c in g.candidates)
        models.add(task.model)
    assert len(zoo_tasks) >= 60 and {"resnet50", "bert_base", "gpt2", "llama7b_layer"} <= models
