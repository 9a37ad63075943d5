"""CUDA sketches (built without a GPU): thread-extent constraints on tile factors."""
from __future__ import annotations

import math
import random

import pytest

from tlm.constrained import InvalidProgram, apply_sentence
from tlm.language import EOS, legal_next_tokens, prompt_tokens, read_decisions
from tlm.space import build_space

pytestmark = pytest.mark.slow  # the CUDA tensor intrinsics import costs ~15-60 s once


def test_thread_groups_follow_bind_fuse_split(tasks, cuda_hw):
    sk = build_space(tasks["matmul"], cuda_hw).sketches[0]
    tiles = [c.inst_index for c in sk.choices if c.kind == "tile"]
    by_axis = {g.axis: g for g in sk.thread_groups}
    assert set(by_axis) == {"threadIdx.x", "vthread.x"}
    assert by_axis["threadIdx.x"].members == ((tiles[0], 2), (tiles[1], 2))
    assert (by_axis["threadIdx.x"].low, by_axis["threadIdx.x"].high) == (32, 1024)
    assert by_axis["vthread.x"].members == ((tiles[0], 1), (tiles[1], 1))
    assert by_axis["vthread.x"].high == 8


@pytest.mark.parametrize("name", ["matmul", "conv2d", "softmax"])
def test_legal_walks_keep_thread_extents_in_range(tasks, cuda_hw, name):
    task = tasks[name]
    space = build_space(task, cuda_hw)
    rng = random.Random(5)
    ok = rejected = 0
    for sk in space.sketches:
        for _ in range(4):
            words = prompt_tokens(space, sk)
            while words[-1] != EOS:
                legal = legal_next_tokens(words, task, cuda_hw)
                assert legal
                words.append(rng.choice(sorted(legal)))
            state = read_decisions(words, task, cuda_hw)
            factors = {c.inst_index: v for c, v in state.values if c.kind == "tile"}
            for g in sk.thread_groups:
                extent = math.prod(factors[t][p] for t, p in g.members)
                assert g.low <= extent <= g.high, (g.axis, extent)
            try:
                apply_sentence(words, task, cuda_hw)  # never repaired; postprocs may still say no
                ok += 1
            except InvalidProgram as exc:  # only the (unmodelled) shared-memory limit remains
                assert "VerifyGPUCode" in str(exc)
                rejected += 1
    assert ok >= 3 * rejected
