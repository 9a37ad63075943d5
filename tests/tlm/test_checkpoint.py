"""Which checkpoint a resumed run starts from, when the runner's own record lags the disk.

Ray Train learns of a worker's checkpoint when its controller next polls the worker; a run
killed in between leaves a complete checkpoint on disk that Ray's snapshot does not list (seen
in CI: the rerun of a killed ``tlm train`` started from scratch). A resumed run therefore
takes the newest *complete* checkpoint of its run directory, checked against the manifest the
checkpoint writes last, and never a half-copied one.
"""
from __future__ import annotations

import os

import torch

from tlm.model.checkpoint import is_complete, load_train_state, newer_checkpoint, newest_complete, save_checkpoint
from tlm.model.network import build_model, model_config
from tlm.model.tokenizer import build_tokenizer


def _save(path, step: int) -> str:
    tok = build_tokenizer()
    mcfg = model_config("tiny", tok, 64)
    model = build_model(mcfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.zeros((1, 4), dtype=torch.long)).logits.sum().backward()
    opt.step()
    return save_checkpoint(str(path), model=model, tokenizer=tok, cfg=mcfg, optimizer=opt,
                           state={"step": step, "epoch": 0, "batch_in_epoch": step, "history": []})


def test_the_newest_complete_checkpoint_wins_and_a_half_copied_one_never_does(tmp_path):
    run = tmp_path / "run"
    five, ten = _save(run / "checkpoint_a", 5), _save(run / "checkpoint_b", 10)
    fifteen = _save(run / "checkpoint_c", 15)
    weights = os.path.join(fifteen, "model.safetensors")
    with open(weights, "r+b") as f:  # a copy cut short: the size no longer matches the manifest
        f.truncate(os.path.getsize(weights) // 2)
    missing = _save(run / "checkpoint_d", 20)
    os.remove(os.path.join(missing, "optimizer.safetensors"))
    (run / "checkpoint_e").mkdir()  # Ray made the directory, nothing was copied yet
    (run / "tokenizer").mkdir()  # not a checkpoint at all

    assert [is_complete(p) for p in (five, ten, fifteen, missing)] == [True, True, False, False]
    assert newest_complete(str(run)) == ten
    assert load_train_state(newest_complete(str(run)))["step"] == 10
    assert newest_complete(str(tmp_path / "never-ran")) is None


def test_the_runner_s_checkpoint_is_kept_unless_the_disk_holds_a_newer_one(tmp_path):
    five, ten = _save(tmp_path / "checkpoint_a", 5), _save(tmp_path / "checkpoint_b", 10)
    assert newer_checkpoint(five, ten) == ten  # Ray had registered 5 when the run was killed
    assert newer_checkpoint(ten, five) == ten  # Ray restarted a worker after the run's start
    assert newer_checkpoint(None, ten) == ten  # Ray had registered nothing
    assert newer_checkpoint(five, None) == five
    assert newer_checkpoint(None, None) is None
