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


def _walk_both(space, sketch, rng):
    """A random walk read by a DecisionState on the sketch-only domains and one on a live replay:
    the legal words at every step."""
    from tlm.language import DecisionState
    from tlm.language.replay import LiveReplay

    fast, live = DecisionState(space, sketch, 0), DecisionState(space, sketch, 0)
    live.replay.close()
    live.replay = LiveReplay(sketch, space.task.mod, cache_key=(space.uid,))
    try:
        while not fast.ended:
            legal = fast.legal()
            assert legal == live.legal(), (space.task.task_name, sketch.sketch_id, fast.values)
            word = rng.choice(sorted(legal))
            fast.feed(word)
            live.feed(word)
        assert live.ended
    finally:
        fast.close()
        live.close()


def test_sketch_only_domains_are_what_a_live_replay_gives(zoo_tasks, cpu_hw):
    """Where a sketch's domains are read from the sketch alone (``replay.static_domains``: no live
    replay while decoding), a live replay along random walks allows the same words at every step."""
    import random

    from tlm.language import build_space, live_sketches
    from tlm.language.replay import static_domains

    rng, static, live = random.Random(0), 0, 0
    for task in zoo_tasks:
        space = build_space(task, cpu_hw)
        for sk in live_sketches(space):
            if not static_domains(sk, cpu_hw.kind):
                live += 1
                continue
            static += 1
            for _ in range(2):
                _walk_both(space, sk, rng)
    assert static >= 40 and live >= 5, (static, live)
