"""Constrained domains: every walk through the legal words is a valid, correct program."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tlm.language import InvalidProgram, apply_sentence
from tlm.language import legal_next_tokens, prompt_tokens
from tlm.language.space import build_space
from tests.helpers.language import random_walk


_REFS: dict = {}


def reference(task):
    from collectors.correctness import make_reference

    if task.workload_key not in _REFS:
        _REFS[task.workload_key] = make_reference(task.mod, seed=0)
    return _REFS[task.workload_key]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d"])
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_legal_walks_build_and_compute_the_right_answer(tasks, cpu_hw, name, data):
    from collectors.correctness import check_schedule

    task = tasks[name]
    words = random_walk(data, task, cpu_hw)
    program = apply_sentence(words, task, cpu_hw)  # raises if TVM repaired anything
    assert check_schedule(program.schedule, reference(task), cpu_hw.target) is None


def test_legal_words_are_exactly_the_divisors(tasks, cpu_hw):
    task = tasks["matmul"]
    space = build_space(task, cpu_hw)
    words = prompt_tokens(space, space.sketches[0])
    assert legal_next_tokens(words, task, cpu_hw) == {"tile"}
    words.append("tile")
    assert legal_next_tokens(words, task, cpu_hw) == {str(d) for d in (1, 2, 4, 8, 16, 32, 64)}
    words += ["2", "4"]  # 64 / 8 = 8 left for the last two factors; innermost <= 64
    assert legal_next_tokens(words, task, cpu_hw) == {"1", "2", "4", "8"}
    words.append("2")
    assert legal_next_tokens(words, task, cpu_hw) == {"4"}  # the last factor is forced
    words.append("4")
    assert legal_next_tokens(words, task, cpu_hw) == {"tile"}


def test_reduction_tile_respects_the_innermost_bound(tasks, cpu_hw):
    task = tasks["matmul"]
    space = build_space(task, cpu_hw)
    words = prompt_tokens(space, space.sketches[0])
    words += "tile 1 1 1 64 tile 1 1 2 48 tile".split()
    # k = 128 in 2 factors with the inner one <= 64: the outer one must be >= 2
    assert legal_next_tokens(words, task, cpu_hw) == {"2", "4", "8", "16", "32", "64", "128"}


def test_compute_locations_come_from_the_live_schedule(tasks, cpu_hw):
    task = tasks["softmax"]
    space = build_space(task, cpu_hw)
    sk = next(s for s in space.sketches if s.choices[0].kind == "parallel")
    words = prompt_tokens(space, sk) + ["parallel", "32", "pick", "0", "at"]
    legal = legal_next_tokens(words, task, cpu_hw)
    assert "root" in legal and legal <= {"root", "inline"} | {str(i) for i in range(8)}
    assert len(legal) >= 2


def test_prompt_words_offer_the_sketches(tasks, cpu_hw):
    task = tasks["softmax"]
    space = build_space(task, cpu_hw)
    p = prompt_tokens(space, space.sketches[0])
    i = p.index("sketch")
    offered = legal_next_tokens(p[: i + 1], task, cpu_hw)
    assert offered == {str(k) for k in range(len(space.sketches))}


def test_repaired_programs_are_caught(tasks, cpu_hw):
    """The check must be able to fail: a decision TVM silently repairs is reported."""
    from tlm.language import check_trace
    from tlm.language import build_trace

    task = tasks["matmul"]
    sk = build_space(task, cpu_hw).sketches[0]
    values = [(c, [7, 1, 1, 1] if c.kind == "tile" and c.extent == 64 else
               ([c.extent] + [1] * (c.n - 2) + [1] if c.kind == "tile" else
                (c.max_parallel if c.kind == "parallel" else c.candidates[0])))
              for c in sk.choices]
    want = {c.inst_index: v for c, v in values if c.kind == "tile"}
    with pytest.raises(InvalidProgram, match="requested decision \\[7, 1, 1, 1\\]"):
        check_trace(build_trace(sk, values), want, task, cpu_hw)


@pytest.mark.parametrize("name", ["softmax", "conv2d"])
def test_cached_compute_locations_equal_fresh_probes(tasks, cpu_hw, name):
    """The location cache is keyed on the unit-factor pattern: check it against TVM itself.

    Walk A is random; walk B picks other factors with the same 1/not-1 pattern, so its
    compute-location step hits A's cache entry; the cached candidates must equal a probe.
    """
    import random

    from tlm.language import DecisionState
    from tlm.language.replay import cached_locations, compute_locations

    task = tasks[name]
    space = build_space(task, cpu_hw)
    rng = random.Random(3)
    compared = 0

    def walk(sk, like=None):
        nonlocal compared
        st, words = DecisionState(space, sk, 0), []
        while not st.ended:
            cur = st.replay.current()
            legal = sorted(st.legal())
            if cur is not None and cur[0].kind == "at" and st._in_group and like is not None:
                cached = cached_locations(cur[1].key)
                if cached is not None:  # probed by walk A (same key)
                    assert cached == tuple(compute_locations(cur[1].sch, cur[1].block_rv))
                    compared += 1
            if like is not None and len(words) < len(like) and cur is not None and cur[0].kind == "tile" \
                    and like[len(words)].isdigit():
                same = [w for w in legal if w.isdigit() and (w == "1") == (like[len(words)] == "1")]
                w = rng.choice(same) if same else rng.choice(legal)
            elif like is not None and len(words) < len(like) and like[len(words)] in legal:
                w = like[len(words)]
            else:
                w = rng.choice(legal)
            words.append(w)
            st.feed(w)
        st.close()
        return words

    for _ in range(3):
        for sk in space.sketches:
            if any(c.kind == "at" for c in sk.choices):
                walk(sk, like=walk(sk))
    assert compared >= 3


def test_legal_words_from_several_threads_agree(tasks, cpu_hw):
    """Serving may ask from several threads at once: answers equal the sequential ones."""
    from concurrent.futures import ThreadPoolExecutor

    task = tasks["matmul"]
    space = build_space(task, cpu_hw)
    base = prompt_tokens(space, space.sketches[1])
    prefixes = [base + ["tile"], base + "tile 2".split(), base + "tile 2 4".split(), base + "tile 2 4 2".split()]
    expected = [legal_next_tokens(p, task, cpu_hw) for p in prefixes]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda p: legal_next_tokens(p, task, cpu_hw), prefixes * 3))
    assert got == expected * 3


@pytest.mark.parametrize("name", ["softmax", "conv2d"])
def test_compute_locations_equal_brute_force_probes(tasks, cpu_hw, name):
    """Every location TVM keeps when asked for it directly, and no other, is listed."""
    from tvm.s_tir.schedule import Schedule, Trace

    from collectors.sketches import probe_compute_location
    from tlm.language.replay import compute_locations

    task = tasks[name]
    checked = 0
    for sk in build_space(task, cpu_hw).sketches:
        sch = Schedule(task.mod, seed=11)

        def provider(inst, inputs, attrs, decision, sch=sch):
            nonlocal checked
            if inst.kind.name == "SampleComputeLocation":
                listed = compute_locations(sch, inputs[0])
                brute = [d for d in range(-2, 40) if probe_compute_location(sch, inputs[0], d) == d]
                assert listed == brute
                checked += 1
            return decision

        Trace(sk.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    assert checked > 0


def test_a_tiled_matmul_decodes_without_a_live_replay_and_a_softmax_with_one(tasks, cpu_hw):
    """The matmul's tiles split the block's own loops and nothing is computed at a chosen loop:
    its domains come from the sketch (no TVM while decoding); the softmax chooses compute
    locations, which only a live replay lists."""
    from tlm.language import DecisionState, live_sketches
    from tlm.language.replay import LiveReplay, StaticReplay, static_domains

    mm = build_space(tasks["matmul"], cpu_hw)
    assert all(static_domains(sk, "cpu") for sk in mm.sketches)
    assert isinstance(DecisionState(mm, mm.sketches[0], 0).replay, StaticReplay)
    sm = build_space(tasks["softmax"], cpu_hw)
    at = [sk for sk in live_sketches(sm) if any(c.kind == "at" for c in sk.choices)]
    assert at and not any(static_domains(sk, "cpu") for sk in at)
    state = DecisionState(sm, at[0], 0)
    assert isinstance(state.replay, LiveReplay)
    state.close()
