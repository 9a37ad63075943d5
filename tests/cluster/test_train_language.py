"""Language versions in training: a set says its version, a base reads only its own or an older
one, and a version-1 base fine-tuned on version-2 sentences learns the new words (no Ray: the
job's preparation and the training loop are called directly)."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.corpora import sentence_sets, small_tasks, znver4
from tlm.service.generator import generate

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_BASE = ROOT / "models" / "tlm-small-pretrain"  # a version-1 model


@pytest.fixture(scope="module")
def v2_sets(tmp_path_factory):
    return sentence_sets(tmp_path_factory.mktemp("v2"), per_sketch=1, top_k=2, language=2)[0]


def _prepare(dataset, base, tmp_path, stage="finetune"):
    from cluster.train_job import TrainJob, prepare
    from tlm.model.train import TrainConfig

    job = TrainJob(dataset_dir=str(dataset), out_dir=str(tmp_path / "models"), storage_path=str(tmp_path / "runs"),
                   name="v", workers=1, hardware_key="cpu-znver4-2c" if stage == "finetune" else None,
                   base_path=str(base) if base else None)
    return prepare(TrainConfig(stage=stage, preset="tiny", batch_size=1, max_steps=2), job)


def test_a_set_says_its_version_and_its_sentences_speak_it(v2_sets):
    from tlm.model.dataset import built_with

    for name in ("pretrain.parquet", "finetune.parquet"):
        path = str(v2_sets / name)
        assert built_with(path).language == 2
        texts = pq.read_table(path, columns=["text"]).column("text").to_pylist()
        assert texts and all(t.startswith("[BOS] language 2 hw ") and " write " in t for t in texts)


def test_a_version_1_base_learns_the_words_of_version_2_and_trains(v2_sets, tmp_path):
    from tlm.model.network import language_of, load_model
    from tlm.model.tokenizer import load_tokenizer
    from tlm.model.train import LocalSession, TrainConfig, train_loop_per_worker
    from cluster.train_job import read_rows

    base_vocab = load_tokenizer(str(SHIPPED_BASE)).get_vocab()
    assert "dim" not in base_vocab
    spec = _prepare(v2_sets, SHIPPED_BASE, tmp_path)
    assert spec["model_config"]["language"] == 2
    vocab = load_tokenizer(spec["tokenizer_dir"]).get_vocab()
    assert {w: vocab[w] for w in base_vocab} == base_vocab  # the base's words keep their ids
    assert {"language", "read", "write", "dim", "identity", "lanes", "regs", "level"} <= set(vocab)
    assert spec["model_config"]["vocab_size"] == len(vocab) > len(base_vocab)

    rows = read_rows(spec["data_file"], ("cpu-znver4-2c",))
    session = LocalSession(rows, str(tmp_path / "ckpt"))
    cfg = TrainConfig(stage="finetune", preset="small", batch_size=1, max_steps=2, eval_every=2, eval_batches=1)
    train_loop_per_worker(spec | {"train": asdict(cfg), "session": session})  # from the base: spec["base_model_path"]
    model, tok, mcfg = load_model(session.checkpoints[-1])
    assert mcfg.language == 2 and language_of(model) == 2
    emb = model.get_input_embeddings().weight
    assert emb.shape[0] == len(tok) == len(vocab)
    # the generator writes its prompts in the model's version, and the program is proven as ever
    g = generate(small_tasks()["matmul"], znver4(), model, tok, k=1)
    assert g.candidates[0].words[:3] == ["[BOS]", "language", "2"] and g.candidates[0].schedule is not None


def test_an_older_set_is_refused_by_a_newer_base(tmp_path):
    """A base that reads version 2 is never fine-tuned on version-1 sentences: it says how to rebuild."""
    import shutil

    v1_sets = sentence_sets(tmp_path / "v1", per_sketch=0, top_k=2)[0]
    base = tmp_path / "v2-base"
    shutil.copytree(SHIPPED_BASE, base)
    info = json.loads((base / "tlm_model.json").read_text())
    info["model_config"]["language"] = 2
    (base / "tlm_model.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"language version 1, but the base model reads version 2: "
                                         r"rebuild it with `tlm dataset build --language 2`"):
        _prepare(v1_sets, base, tmp_path)


def test_grown_vocabulary_rows_start_as_the_mean_of_the_trained_ones():
    import torch

    from tlm.model.network import build_model, model_config
    from tlm.model.tokenizer import build_tokenizer
    from tlm.model.train import grow_vocabulary

    tok = build_tokenizer()
    model = build_model(model_config("tiny", tok, 50))
    before = model.get_input_embeddings().weight.detach().clone()
    grow_vocabulary(model, before.shape[0] + 3)
    after = model.get_input_embeddings().weight
    assert after.shape[0] == before.shape[0] + 3 and torch.equal(after[: before.shape[0]], before)
    assert torch.allclose(after[-1], before.mean(0)) and model.get_output_embeddings().weight is after
    grow_vocabulary(model, 5)  # never shrinks
    assert model.get_input_embeddings().weight.shape[0] == before.shape[0] + 3
