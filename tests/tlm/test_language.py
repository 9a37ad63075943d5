"""Sentences: exact round trip of sampled traces, readable prompts, clear errors."""
from __future__ import annotations

import json

import pytest

from tests.helpers.language import assert_round_trip, sample_traces, sampling_decisions
from tlm.language import LanguageError, decode, encode
from tlm.language.space import build_space


@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d"])
def test_round_trip_of_sampled_traces(tasks, cpu_hw, name):
    task = tasks[name]
    traces = sample_traces(task, cpu_hw, per_sketch=2)
    assert traces
    for tr in traces:
        assert_round_trip(task, cpu_hw, tr)


def test_round_trip_from_trace_json_and_simplified_trace(tasks, cpu_hw):
    from collectors.tir import trace_json

    task = tasks["softmax"]
    tr = sample_traces(task, cpu_hw, per_sketch=1)[3]
    s1 = encode(task, cpu_hw, json.dumps(trace_json(tr)))
    s2 = encode(task, cpu_hw, tr.simplified(remove_postproc=True))
    assert s1 == s2 == encode(task, cpu_hw, tr)


def test_mutated_parallel_value_is_a_decision(tasks, cpu_hw):
    """MutateParallel rewrites the annotation value: the sentence must carry it."""
    from collectors.tir import trace_json

    task = tasks["matmul"]
    tr = trace_json(sample_traces(task, cpu_hw, per_sketch=1)[0])
    for inst in tr[0]:
        if inst[0] == "Annotate" and inst[2][0] == "meta_schedule.parallel":
            inst[1][1] = 6
    s = encode(task, cpu_hw, tr)
    i = s.tokens.index("parallel", s.prompt_len)
    assert s.tokens[i + 1] == "6"
    back = decode(s, task, cpu_hw)
    anns = [int(i.inputs[1]) for i in back.insts
            if i.kind.name == "Annotate" and str(i.attrs[0]) == "meta_schedule.parallel"]
    assert anns == [6]


def test_znver4_prompt_is_readable_and_sentence_has_one_group_per_choice(tasks, znver4_hw):
    task = tasks["matmul"]
    s = encode(task, znver4_hw, sample_traces(task, znver4_hw, per_sketch=1)[0])
    text = s.text
    assert text.startswith("[BOS] hw cpu arch znver4 cores 2 vector 512 isa ")
    isa = s.tokens[s.tokens.index("isa") + 1: s.tokens.index("task")]
    assert {"avx2", "fma", "avx512f"} <= set(isa)  # from LLVM's znver4 features
    assert "task matmul name fused matmul relu" in text
    assert "block C iters S 64 S 96 R 128 dtype float32" in text
    assert "SamplePerfectTile n 4 extent 64 inner 64" in text
    assert s.tokens[s.prompt_len - 1] == "decide" and s.tokens[-1] == "[EOS]"
    groups = [w for w in s.decisions if w in ("tile", "pick", "at", "parallel", "ptile")]
    assert groups == ["tile", "tile", "tile", "parallel", "pick"]


def test_trace_from_another_workload_is_rejected_with_position(tasks, cpu_hw):
    tr = sample_traces(tasks["matmul"], cpu_hw, per_sketch=1)[0]
    with pytest.raises(LanguageError, match="not in the design space") as err:
        encode(tasks["softmax"], cpu_hw, tr)
    assert err.value.position >= 0


def test_unknown_instruction_kind_is_rejected(tasks, cpu_hw):
    from collectors.tir import trace_json

    tr = trace_json(sample_traces(tasks["matmul"], cpu_hw, per_sketch=1)[0])
    tr[0][4][0] = "FrobnicateLoops"
    with pytest.raises(LanguageError, match="unknown instruction kind 'FrobnicateLoops'") as err:
        encode(tasks["matmul"], cpu_hw, tr)
    assert err.value.position == 4


def test_illegal_tile_factor_names_its_position(tasks, cpu_hw):
    task = tasks["matmul"]
    s = encode(task, cpu_hw, sample_traces(task, cpu_hw, per_sketch=1)[0])
    words = list(s.tokens)
    pos = words.index("tile", s.prompt_len) + 1
    words[pos] = "7"  # 7 does not divide the extent 64
    with pytest.raises(LanguageError, match="illegal word '7'.*extent 64") as err:
        decode(words, task, cpu_hw)
    assert err.value.position == pos


def test_innermost_bound_is_enforced(tasks, cpu_hw):
    task = tasks["matmul"]
    s = encode(task, cpu_hw, sample_traces(task, cpu_hw, per_sketch=1)[0])
    words = list(s.tokens)
    pos = words.index("tile", s.prompt_len)
    words[pos + 1: pos + 5] = ["1", "1", "1", "64"]
    decode(words, task, cpu_hw)  # 64 is allowed (max_innermost_factor=64)
    k = words.index("tile", pos + 5) + 1  # k loop: 128 = 1 x 128 breaks the bound
    words[k: k + 2] = ["1", "128"]
    with pytest.raises(LanguageError) as err:
        decode(words, task, cpu_hw)
    assert err.value.position == k + 1


def test_wrong_prompt_and_truncation_and_trailing_words(tasks, cpu_hw):
    task = tasks["matmul"]
    s = encode(task, cpu_hw, sample_traces(task, cpu_hw, per_sketch=1)[0])
    words = list(s.tokens)
    bad = words.copy()
    bad[4] = "skylake"
    with pytest.raises(LanguageError, match="prompt does not match") as err:
        decode(bad, task, cpu_hw)
    assert err.value.position == 4
    with pytest.raises(LanguageError, match="ends before") as err:
        decode(words[:-3], task, cpu_hw)
    assert err.value.position == len(words) - 3
    with pytest.raises(LanguageError, match="after \\[EOS\\]"):
        decode(words + ["tile"], task, cpu_hw)


def test_space_lists_every_sketch_and_its_choices(tasks, cpu_hw):
    from collectors.sketches import design_space

    task = tasks["conv2d"]
    space = build_space(task, cpu_hw)
    assert len(space.sketches) == len(design_space(task.mod, cpu_hw))
    sk = space.sketches[0]
    kinds = [c.kind for c in sk.choices]
    assert kinds.count("tile") == 7 and "pick" in kinds and "parallel" in kinds
    tiles = [c for c in sk.choices if c.kind == "tile"]
    assert [c.extent for c in tiles] == [1, 16, 14, 14, 8, 3, 3]
    assert {c.n for c in tiles} == {4, 2} and {c.max_innermost for c in tiles} == {64}
    pick = next(c for c in sk.choices if c.kind == "pick")
    assert pick.candidates == (0, 16, 64, 512)
    soft = build_space(tasks["softmax"], cpu_hw)
    assert any(c.kind == "at" for sk in soft.sketches for c in sk.choices)


def _facts_by_every_replay(task, sketch):
    """The static facts as the space read them until 2026-12-06: every choice read in every run
    (the sketch's own decisions and FACT_REPLAYS random ones, each replayed whole)."""
    from tvm.s_tir.schedule import Schedule, Trace

    from tlm.language.replay import compute_locations
    from tlm.language.space import FACT_REPLAYS

    by_index = {c.inst_index: c for c in sketch.choices}
    seen = {i: set() for i in by_index}
    for seed, tr in enumerate([sketch.trace] + [Trace(sketch.trace.insts, {}) for _ in range(FACT_REPLAYS)]):
        sch, counter = Schedule(task.mod, seed=seed + 1), [0]

        def provider(inst, inputs, attrs, decision, sch=sch, counter=counter):
            i = counter[0]
            counter[0] += 1
            c = by_index.get(i)
            if c is not None and c.kind in ("tile", "ptile"):
                seen[i].add(int(sch.get(inputs[0]).extent))
            elif c is not None and c.kind == "at":
                seen[i].add(len(compute_locations(sch, inputs[0])))
            return decision

        tr.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    return [next(iter(seen[c.inst_index])) if len(seen[c.inst_index]) == 1 else None for c in sketch.choices]


@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d"])
def test_static_facts_are_what_replaying_every_choice_in_every_run_gives(tasks, cpu_hw, name):
    """The space replays random decisions only as far as the last choice they can change, and
    reads a tile of a block iterator's own loop from the first run (2.5x less time a greedy
    request spends on facts): the facts stay what the full replays gave, which the prompts of
    every shipped dataset were written with."""
    from tlm.language.space import clear_space_cache

    clear_space_cache()
    space = build_space(tasks[name], cpu_hw)
    for sk in space.sketches:
        got = [c.extent if c.kind in ("tile", "ptile") else c.n_locations if c.kind == "at" else None
               for c in sk.choices]
        want = [f if c.kind in ("tile", "ptile", "at") else None
                for c, f in zip(sk.choices, _facts_by_every_replay(tasks[name], sk))]
        assert got == want, (name, sk.sketch_id)
    if name == "softmax":  # compute locations are read by the random runs too
        assert any(c.kind == "at" and c.n_locations is not None for sk in space.sketches for c in sk.choices)


def test_the_liveness_check_starts_from_the_replay_the_space_made(tasks, cpu_hw):
    """A new subgraph's liveness check took a replay of each sketch that reading its facts had
    just made; it is handed over once, and a sketch whose replay is gone is replayed again. The
    facts are read when first asked for (a greedy answer of one writes one sketch)."""
    from tlm.language.decisions import live_sketches
    from tlm.language.space import clear_space_cache, take_own_replay

    clear_space_cache()
    space = build_space(tasks["conv2d"], cpu_hw)
    first = space.sketches[0]
    assert take_own_replay(first) is None  # no facts read yet, no replay made
    assert any(c.extent for c in first.choices)
    assert take_own_replay(first) is not None and take_own_replay(first) is None  # once
    assert live_sketches(space) == space.sketches and all(sk.dead == "" for sk in space.sketches)


def test_a_space_is_built_once_per_workload_until_the_cache_is_cleared(tasks, cpu_hw):
    """bench/serve.py times a deployer's first request of a subgraph with the cache cleared."""
    from tlm.language.space import clear_space_cache

    task = tasks["conv2d"]
    first = build_space(task, cpu_hw)
    assert build_space(task, cpu_hw) is first
    clear_space_cache()
    again = build_space(task, cpu_hw)
    assert again is not first and len(again.sketches) == len(first.sketches)


def test_a_task_of_the_same_workload_under_another_name_is_prompted_with_its_own_name(tasks, cpu_hw):
    """The workload key ignores names, and the prompt kept on a space said the first task's: after
    a convolution named "padded" was encoded, the test fixture's own one was prompted "padded" too
    (CI, one worker running both)."""
    from dataclasses import replace

    task = tasks["conv2d"]
    renamed = replace(task, task_name="padded", op_kind="unknown")
    assert renamed.workload_key == task.workload_key
    trace = build_space(task, cpu_hw).sketches[0].trace
    words = encode(renamed, cpu_hw, trace).tokens
    assert words[words.index("name") - 1:words.index("name") + 2] == ("unknown", "name", "padded")
    words = encode(task, cpu_hw, trace).tokens
    assert words[words.index("name") - 1:words.index("name") + 4] == ("conv2d", "name", "fused", "conv2d", "relu")


def test_the_znver4_docstring_example_is_what_encode_writes(tasks, znver4_hw):
    import tlm.language.sentences as L
    from tlm.language.space import build_space

    doc = L.__doc__
    example = doc[doc.index("(line breaks added)::") + len("(line breaks added)::"): doc.index("It reads:")]
    words = example.split()
    task = tasks["matmul"]
    space = build_space(task, znver4_hw)
    prompt = L.prompt_tokens(space, space.sketches[0])
    assert words[: len(prompt)] == prompt
    back = decode(words, task, znver4_hw)
    assert sampling_decisions(back) == [[2, 4, 1, 8], [1, 6, 4, 4], [16, 8], 3]


def test_replays_reuse_their_threads(tasks, cpu_hw, monkeypatch):
    """Reading sentence after sentence does not start a thread each time: a finished replay's
    worker takes the next one (a live replay holds its thread until it ends or is closed)."""
    import threading

    task = tasks["softmax"]
    sentence = encode(task, cpu_hw, sample_traces(task, cpu_hw, per_sketch=1)[0])
    decode(sentence, task, cpu_hw)
    started = []
    real_start = threading.Thread.start

    def counting_start(self):
        started.append(self.name)
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for _ in range(20):
        decode(sentence, task, cpu_hw)
    assert started.count("tlm-replay") <= 1


def _prompt(task, hw, sketch_id=0, language=2):
    from tlm.language import prompt_tokens

    space = build_space(task, hw)
    return prompt_tokens(space, space.sketches[sketch_id], language)


def test_version_2_prompt_shows_which_iterators_index_each_dimension():
    """An NN and an NT matmul of one shape read the same in version 1; version 2 says B's contiguous
    (last) dimension is walked by j (iterator 1) in one and by k (iterator 2) in the other. Encoded
    for a fixed AVX2 key, whatever CPU runs the test (it failed on an AVX-512 host: "lanes 16")."""
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task, matmul

    cpu_hw = fixed_cpu("znver3")
    nn = make_task(matmul(64, 48, 32), "matmul", "matmul")
    nt = make_task(matmul(64, 48, 32, transpose_b=True), "matmul", "matmul")
    v1 = [_prompt(t, cpu_hw, language=1) for t in (nn, nt)]
    assert v1[0] == v1[1]
    a, b = (" ".join(_prompt(t, cpu_hw)) for t in (nn, nt))
    assert a.startswith("[BOS] language 2 hw cpu ")
    assert "block C iters S 64 S 48 R 32 dtype float32 lanes 8 read dim 0 dim 2 read dim 2 dim 1 write identity" in a
    assert "read dim 0 dim 2 read dim 1 dim 2 write identity" in b
    assert " regs 16 task " in a  # AVX2: 16 vector registers


def test_version_2_prompt_tells_fused_sketches_apart_in_the_same_words_in_every_family(tasks, cpu_hw):
    """Consumer fusion (matmul + ReLU) and a cache write (plain matmul) put their ReverseComputeAt
    under the outer or the inner tiles; version 2 says which, as the same ``level`` word in both."""
    from tests.helpers.workloads import make_task, matmul

    for task in (tasks["matmul"], make_task(matmul(), "matmul", "matmul")):
        space = build_space(task, cpu_hw)
        levels = []
        for sk in space.sketches:
            p = _prompt(task, cpu_hw, sk.sketch_id)
            levels.append(tuple(p[i + 1] for i, w in enumerate(p) if w == "level"))
            assert len(set(map(tuple, (_prompt(task, cpu_hw, s.sketch_id) for s in space.sketches)))) == len(space.sketches)
        assert sorted(levels) == [(), ("1",), ("2",)]


def test_both_versions_decode_to_one_program_and_read_their_own_prompts(tasks, cpu_hw):
    from tlm.language import legal_next_tokens, sentence_language

    task = tasks["conv2d"]
    tr = sample_traces(task, cpu_hw, per_sketch=1)[0]
    v1, v2 = encode(task, cpu_hw, tr), encode(task, cpu_hw, tr, language=2)
    assert v1.decisions == v2.decisions and v2.prompt_len > v1.prompt_len
    assert (sentence_language(v1.tokens), sentence_language(v2.tokens)) == (1, 2)
    assert sampling_decisions(decode(v1, task, cpu_hw)) == sampling_decisions(decode(v2, task, cpu_hw))
    assert legal_next_tokens(["[BOS]"], task, cpu_hw) == {"hw", "language"}
    assert legal_next_tokens(list(v2.tokens[:3]), task, cpu_hw) == {"hw"}
    assert legal_next_tokens(list(v2.prompt), task, cpu_hw) == legal_next_tokens(list(v1.prompt), task, cpu_hw)
    with pytest.raises(LanguageError, match="unknown language version 9"):
        decode(["[BOS]", "language", "9", *v1.tokens[1:]], task, cpu_hw)
    with pytest.raises(ValueError, match="unknown language version 3"):
        encode(task, cpu_hw, tr, language=3)
