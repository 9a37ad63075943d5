"""The generator: a trained TLM writes schedules for a task in one pass, valid as written.

For every live sketch of the task's design space the sketch's prompt is fed to the model and
the decisions are decoded under :class:`tlm.service.constrained.LegalTokensProcessor`, which leaves only
words that keep the program valid; each finished sentence is then proven valid by
:func:`tlm.language.apply_sentence` (TVM kept every decision; every postprocessor accepts).
A sentence that fails that proof is a bug and raises: nothing is repaired, retried or dropped.

Sketches: the prompt *contains* the sketch (the model is trained on decisions given a
sketch, not on choosing one), so the sketch is chosen outside the model: a greedy answer of one
writes the sketch the rule scheduler would (:data:`GREEDY_SKETCHES`); otherwise every live sketch is
generated and the candidates are ranked by the model's mean log-probability per decision token
(``Candidate.score``).

* ``k == 1``: greedy decoding of the rules' sketch (KV cache): deterministic, the same schedule
  run to run and process to process.
* ``k > 1``: beam search with ``k`` beams per sketch (deterministic as well), all sketches'
  beams pooled, duplicates removed, the ``k`` best kept.
* ``ranker`` given (a :class:`collectors.cost_model.CostModel` of the hardware key): ``pool``
  programs sampled, shared evenly by the sketches (the model's distribution under the
  constraint, seeded), plus
  each sketch's greedy program are all proven valid and ranked by the cost model's predicted
  speed instead of the likelihood, and the ``k`` best kept. Likelihood says what the search's
  fast programs *look like*; it cannot see that a legal compute location repeats a reduction
  768 times, which the cost model's per-store arithmetic counts. Samples, not beams: on the
  six heaviest held-out tasks the fastest of 32 samples per sketch was 0.73x MetaSchedule@256
  (geomean), of 16 beams 0.49x, since beams differ in a word or two (bench/results/pools.json). Still
  deterministic (seeded samples, greedy and the booster are), still no measurement. The rule
  baseline's program (BLIS-style blocking) is in every ranked pool and served first where the
  rules write one (:data:`RULES_FIRST`): no learned ranking's first pick has matched it yet;
  the rules' second opinions (``collectors.rules.VARIANTS``) come next, for a measured budget.
  A ranked ``k == 1`` is then that program alone, and no pool is sampled for it.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from collectors.hardware import Hardware
from collectors.tasks import Task
from tlm.language import (EOS, PAD, apply_sentence, build_space, first_live, legal_next_tokens, live_sketches,
                          prompt_tokens)
from tlm.language.health import rules_of, serial_sketches
from tlm.service.constrained import make_logits_processor

MAX_K = 64  # candidates one call may ask for
#: programs sampled for the cost model to rank (with a ranker), shared evenly by the sketches
#: (32 each for a matmul's 3): enough to hold the fast programs the likelihood ranks below the
#: greedy one, few enough to decode and prove in a few seconds however many sketches a task has
#: (a softmax has a dozen: 32 each took 33 s)
RANK_POOL = 96
#: the ranked pool's sampling temperature (1: the model's own distribution)
POOL_TEMPERATURE = 1.0
#: a ranked pool serves the rules' program first (where the rules write one), the cost model
#: ordering the rest. Measured on the 20 held-out Zen 3 tasks of the quality set, every program
#: of the served pool timed (``bench/results/rankers/pools-znver3.json``, 800 programs, the pool's
#: fastest 0.99x MetaSchedule@256): no learned ranking's first pick came near the rules' program
#: (0.79x): the key's cost model 0.63x, refitted as a pairwise ranker 0.66x, as MetaSchedule's
#: MLP 0.63x (``rankers-shipped-znver3.json``); fitted on 2,786 measured programs of the model's
#: own pools on 159 training workloads (``--strategy tlm-pool``) 0.67x, pairwise 0.63x, MLP
#: 0.70x (``rankers-znver3.json``); allowed to overrule the rules only by a margin, at most 0.78x.
#: With the rules first, the best of the first 4 of the same pools 0.80x -> 0.89x, of 10 0.91x
#: -> 0.94x. In one bench.quality run (20 tasks, both measured in each task's call) the served
#: top-1 0.76x against the cost model's pick 0.62x; whole BERT 248 against 486 ms, the ViT layer
#: 35 against 72 ms, MobileNetV2 6.01 against 5.45 ms (its convolutions are where the cost
#: model's pick is sometimes faster)
RULES_FIRST = True
#: which sketches a greedy answer of one program (``k == 1``, no ranker) decodes on a CPU: "rules", the
#: first live one in the order the rule scheduler tries them (``collectors.rules.sketch_order``); "all",
#: every live sketch, the likeliest program served. Decoding every sketch took 1.77x the time of one
#: (``bench/results/serve.json``), and the likelihood is no judge of sketches (it serves the teacher's
#: on 8 of 16 training tasks, ``sketch_choice.json``). Rocket Lake, 2026-12-07, the shipped model: a new
#: subgraph's greedy answer 75 -> 54 ms p50 in process (12 held-out tasks, both in turn in one process),
#: its programs within noise (``bench.studies.side_by_side``, one call per workload: held out 0.97x /
#: 0.92x the teacher against 0.99x / 0.92x in two calls, training 0.88x against 0.89x;
#: ``levers/side_by_side-greedy-sketch-*.json``)
GREEDY_SKETCHES = "rules"
#: torch intra-op threads while decoding (``TLM_DECODE_THREADS``); None: :func:`decode_threads` decides.
DECODE_THREADS: int | None = max(1, int(os.environ["TLM_DECODE_THREADS"])) if os.environ.get("TLM_DECODE_THREADS") else None


def decode_threads() -> int:
    """Torch's threads for one generation: :data:`DECODE_THREADS` when set; else one while this
    process or another on this host measures, torch's own count (every core) otherwise. Beside a
    collection a second thread's barrier costs much: a ResNet conv2d took 0.19-0.48 s on 1 thread
    and 1.2-9 s on 2 (2-core Zen 3); on a quiet host the prompt's prefill is arithmetic that two
    cores share: greedy p50 40 against 53 ms on 1 thread (Rocket Lake, 12 held-out tasks). A Ray
    Serve replica runs with torch's count set to its one CPU."""
    import torch

    from collectors.host_load import measuring_on_this_host

    if DECODE_THREADS is not None:
        return DECODE_THREADS
    return 1 if measuring_on_this_host() else torch.get_num_threads()


@dataclass
class Candidate:
    """One generated schedule: its sentence, its likelihood under the model and its program."""

    sketch_id: int
    words: list[str]  # the whole sentence, [BOS] .. [EOS]
    prompt_len: int
    logprob: float  # sum of log-probabilities of the decision words (and [EOS]) given the prompt
    n_tokens: int  # decision words counted in logprob
    trace: Any = None  # tvm.s_tir.schedule.Trace: the sketch with these decisions
    schedule: Any = None  # the postprocessed Schedule
    predicted: float | None = None  # the cost model's score (higher is faster), when one ranked it
    latency_s: float | None = None  # measured (correct) latency, once measure_candidates ran
    error: str | None = None  # why its measurement failed (build, run, wrong answer)
    origin: str = "model"  # who wrote it: "model", "rules" (the rule baseline's) or "rules-variant" (rules.VARIANTS)

    @property
    def score(self) -> float:
        """Mean log-probability per decision word: comparable across sketches of different lengths."""
        return self.logprob / max(1, self.n_tokens)

    @property
    def decisions(self) -> list[str]:
        return self.words[self.prompt_len:]

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Generation:
    """What :func:`generate` returns: ranked candidates and where the time went."""

    task_name: str
    workload_key: str
    hardware_key: str
    candidates: list[Candidate] = field(default_factory=list)  # best first
    sketches: int = 0  # live sketches generated
    generate_s: float = 0.0  # model.generate (all sketches)
    check_s: float = 0.0  # proving each candidate valid (replay + postprocessors)
    rank_s: float = 0.0  # the cost model's features and prediction of every proven candidate
    pool: int = 0  # candidates ranked by the cost model (0: ranked by likelihood alone)
    measure_s: float = 0.0  # building, running and checking candidates (measure_candidates)

    @property
    def fastest(self) -> Candidate | None:
        """The measured candidate with the lowest correct latency (None before measuring, or if none ran)."""
        ok = [c for c in self.candidates if c.latency_s is not None]
        return min(ok, key=lambda c: c.latency_s) if ok else None


def generate(task: Task, hardware: Hardware, model: Any, tokenizer: Any, *, k: int = 1, ranker: Any = None,
             pool: int = RANK_POOL, healthy: bool | frozenset = True,
             temperature: float = POOL_TEMPERATURE, rules_first: bool = RULES_FIRST,
             greedy_sketches: str = GREEDY_SKETCHES) -> Generation:
    """``k`` valid schedules for ``task`` on ``hardware``, ranked by the model's likelihood, or
    by ``ranker``'s predicted speed over ``pool`` samples (shared by the sketches) and the greedy programs.
    ``healthy`` (the default; False writes whatever the grammar allows): tile factors kept out of the
    CPU's static failure modes (``tlm.language.health``): measured on 12 held-out Zen 3 convolutions
    it raised the greedy program 0.35x -> 0.48x the teacher and the ranked one 0.51x -> 0.65x, and
    left the fit on training tasks as it was (0.95x), ``bench/results/levers/healthy-*.json``.
    ``temperature``: the ranked pool's sampling temperature (:data:`POOL_TEMPERATURE`);
    ``rules_first``: a ranked pool's first candidate is the rules' program where there is one
    (:data:`RULES_FIRST`), else the cost model's best; ``greedy_sketches``: which sketches a greedy
    answer of one decodes (:data:`GREEDY_SKETCHES`)."""
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {k}")
    if greedy_sketches not in ("rules", "all"):
        raise ValueError(f"greedy_sketches must be 'rules' or 'all', got {greedy_sketches!r}")
    one = greedy_sketches == "rules" and ranker is None and k == 1 and hardware.kind == "cpu"
    out = _generate(task, hardware, model, tokenizer, k, ranker, pool, healthy, temperature, rules_first,
                    whole=False, rules_sketch=one)
    out.candidates = out.candidates[:k]
    return out


def ranked_pool(task: Task, hardware: Hardware, model: Any, tokenizer: Any, ranker: Any, *, pool: int = RANK_POOL,
                healthy: bool | frozenset = True, temperature: float = POOL_TEMPERATURE,
                rules_first: bool = RULES_FIRST) -> Generation:
    """Every candidate of the pool :func:`generate` ranks with ``ranker`` (the greedy programs, ``pool``
    samples, the rules' program), proven and predicted, in served order (``rules_first``: the rules'
    program, then best predicted first): exactly what a served ranked request chooses from, so that
    a study can measure all of it (``bench/studies/pools.py``, ``--strategy tlm-pool``)."""
    if ranker is None:
        raise ValueError("a ranked pool needs a ranker (a cost model of the hardware key)")
    return _generate(task, hardware, model, tokenizer, 1, ranker, pool, healthy, temperature, rules_first, whole=True)


def _generate(task: Task, hardware: Hardware, model: Any, tokenizer: Any, k: int, ranker: Any, pool: int,
              healthy: bool | frozenset, temperature: float, rules_first: bool, *, whole: bool,
              rules_sketch: bool = False) -> Generation:
    """:func:`generate`'s work; with a ranker every candidate of the pool is returned, ranked.
    A ranked answer of one (``k == 1``, not ``whole``) with ``rules_first`` is the rules' program
    where they write one, whatever the pool holds: no pool is decoded for it (``pool`` 1).
    MobileNetV2's 75 ranked tasks spent 24 of 41 s decoding and 9 s proving pools whose first
    candidate was always the rules' (Rocket Lake); a measured budget asks for more and gets the pool."""
    if ranker is not None and not 1 <= pool <= 4 * MAX_K:
        raise ValueError(f"pool must be between 1 and {4 * MAX_K}, got {pool}")
    space = build_space(task, hardware)
    parallel = "parallel" in rules_of(healthy)
    if rules_sketch:  # the first live sketch in the rules' order, alone (GREEDY_SKETCHES)
        sketches = _rules_sketch(space, parallel)
    else:
        sketches = live_sketches(space)
        if parallel:
            sketches = serial_sketches(space, sketches)
    out = Generation(task.task_name, task.workload_key, hardware.key, sketches=len(sketches))
    if not sketches:
        raise ValueError(f"{task.task_name} has no sketch that gives a valid program on {hardware.key}")
    from tlm.model.network import language_of

    prompts = [prompt_tokens(space, sk, language_of(model)) for sk in sketches]
    with _torch_threads(decode_threads()):
        t0 = time.perf_counter()
        served_alone = rules_first and k == 1 and not whole  # the rules' own program, no pool
        ruled = [] if ranker is None else rule_rows(task, hardware, sketches, variants=not served_alone)
        if ranker is None:
            rows = decode_prompts(model, tokenizer, task, hardware, prompts, k, healthy=healthy)
        elif ruled and served_alone:
            rows = ruled[:1]  # served first whatever the pool holds
        else:  # the greedy programs first: the cost model then never loses the likelihood's favourite
            rows = decode_prompts(model, tokenizer, task, hardware, prompts, 1, healthy=healthy)
            rows += decode_prompts(model, tokenizer, task, hardware, prompts, max(1, -(-pool // len(prompts))),
                                   sample=True, healthy=healthy, temperature=temperature)
            rows += ruled
        cands = likelihood_ranked(model, tokenizer, prompts, sketches, rows)
        rule_words = {tuple(prompts[i] + w): "rules" if n == 0 else "rules-variant" for n, (i, w, _) in enumerate(ruled)}
        for c in cands:  # the model may have written one too: then it is the rules' as well
            c.origin = rule_words.get(tuple(c.words), c.origin)
        out.generate_s = time.perf_counter() - t0
    keep = cands[:k] if ranker is None else cands
    t1 = time.perf_counter()
    for c in keep:
        program = apply_sentence(c.words, task, hardware)  # raises if the model wrote an invalid program
        c.trace, c.schedule = program.trace, program.schedule
    out.check_s = time.perf_counter() - t1
    if ranker is not None:
        t2 = time.perf_counter()
        for c, p in zip(keep, ranker.predict(task, hardware, [c.schedule for c in keep])):
            c.predicted = float(p)
        keep.sort(key=lambda c: -c.predicted)  # stable: equal predictions keep the likelihood's order
        if rules_first:  # stable: the rules' variants, then the rest, each in the cost model's order
            keep.sort(key=lambda c: (c.origin != "rules", c.origin != "rules-variant"))
        out.rank_s, out.pool = time.perf_counter() - t2, len(keep)
    out.candidates = keep
    return out


def _rules_sketch(space: Any, parallel: bool) -> list:
    """The first live sketch of ``space`` in the rules' order (``collectors.rules.sketch_order``), as a
    list of one (none: every sketch is dead); with ``parallel`` (healthy decoding's rule) the first of
    :func:`tlm.language.health.serial_sketches` where one of those lives. Only the sketches up to it
    are checked for life."""
    from collectors.rules import sketch_order

    ordered = [space.sketches[i] for i in sketch_order(space.task, space.hardware, [sk.trace for sk in space.sketches])]
    first = first_live(space, serial_sketches(space, ordered)) if parallel else None
    first = first or first_live(space, ordered)
    return [first] if first is not None else []


def serial_default(task: Task, hardware: Hardware) -> str | None:
    """Why TVM's default lowering of ``task`` is predicted faster than any program the model can
    write, or None. A task whose one-core time is under what a parallel region saves
    (``collectors.threads.parallel_target`` 1) and whose design space tiles no block (layout,
    elementwise, softmax, norms) gets a parallel loop from every sketch: MetaSchedule's postproc
    parallelizes its outer loops whatever the annotation says. On the demo's small BERT those
    served programs took 1.6-8.6 us where the default lowering, serial, took 0.01-0.8 us. A tiny
    task with a tiled block is written serial instead (healthy decoding's ``parallel`` rule)."""
    if hardware.kind != "cpu":
        return None
    from collectors.threads import target_of_seconds, task_one_core_seconds
    from tlm.language.health import tiling_of

    est = task_one_core_seconds(task)
    if target_of_seconds(est, hardware.cores) != 1:
        return None
    try:
        space = build_space(task, hardware)
    except ValueError:
        return None  # the source says why it cannot write this task
    if any(tiling_of(space, sk) is not None for sk in space.sketches):
        return None
    return (f"tiny: ~{est * 1e6:.2f} us on one core, less than a parallel region costs, and every sketch "
            f"parallelizes it; TVM's default (serial) lowering kept")


def rule_rows(task: Task, hardware: Hardware, sketches: list, *, variants: bool = False) -> list[tuple[int, list[str], None]]:
    """The rule baseline's program (``collectors.rules``, BLIS-style blocking) as a row of the
    pool (issue 32, item 6), and with ``variants`` the rules' second opinions after it
    (``collectors.rules.VARIANTS``, each program once): a ranked pool serves the first first and
    tries the others next when it may measure. None on a GPU, or where the rules give no program
    of a live sketch (a variant without one is left out)."""
    from collectors.rules import rule_schedule, rule_variants
    from tlm.language import LanguageError, encode

    if hardware.kind != "cpu":
        return []
    try:
        programs = rule_variants(task, hardware) if variants else [rule_schedule(task, hardware)]
    except ValueError:
        return []
    rows: list[tuple[int, list[str], None]] = []
    for n, program in enumerate(programs):
        try:
            sentence = encode(task, hardware, program.schedule.trace)
            idx = next(i for i, sk in enumerate(sketches) if sk.sketch_id == sentence.sketch_id)
        except (ValueError, LanguageError, StopIteration):  # no sentence, or of no live sketch
            if n == 0:
                return []
            continue
        if (idx, list(sentence.decisions), None) not in rows:
            rows.append((idx, list(sentence.decisions), None))
    return rows


def likelihood_ranked(model: Any, tokenizer: Any, prompts: list[list[str]], sketches: list, rows: list) -> list[Candidate]:
    """Distinct decoded sentences (:func:`decode_prompts` rows) as candidates, scored by the model and
    sorted best first (unproven: :func:`generate` proves them)."""
    from tlm.model.scoring import decision_logprobs

    seen, cands, given = set(), [], []
    for i, new, score in rows:
        words = prompts[i] + new
        if tuple(words) in seen:
            continue
        seen.add(tuple(words))
        cands.append(Candidate(sketch_id=sketches[i].sketch_id, words=words, prompt_len=len(prompts[i]),
                               logprob=0.0, n_tokens=0))
        given.append(score)
    missing = [i for i, g in enumerate(given) if g is None]  # beams, and rows written by other means
    if missing:
        rescored = decision_logprobs(model, tokenizer, [cands[i].text for i in missing],
                                     [cands[i].prompt_len for i in missing])
        for i, score in zip(missing, rescored):
            given[i] = score
    for c, (lp, n) in zip(cands, given):
        c.logprob, c.n_tokens = lp, n
    cands.sort(key=lambda c: (-c.score, c.sketch_id, c.text))
    return cands


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def decode_prompts(model: Any, tokenizer: Any, task: Task, hardware: Hardware, prompts: list[list[str]],
                   k: int, *, sample: bool = False, seed: int = 0,
                   healthy: bool = True, temperature: float = 1.0) -> list[tuple[int, list[str], tuple[float, int] | None]]:
    """Constrained decoding of ``prompts`` in one batch (greedy for ``k == 1``, else ``k`` beams per
    prompt; with ``sample``, ``k`` sequences per prompt drawn from the model's distribution under
    the constraint, seeded by ``seed``, so still the same run to run; ``healthy``: the constraint also
    keeps tile factors out of the CPU's static failure modes; ``temperature`` divides the logits
    samples are drawn from), unranked and unproven:
    ``(prompt index, generated words up to [EOS], (log-probability, words) or None)`` for every
    returned sequence; the score is given for greedy and sampled rows (beams are re-scored).
    :func:`generate` ranks and proves these; the serving benchmark times this step alone."""
    import torch

    from tlm.model.cached_forward import supports
    from tlm.service.decoding import decode_constrained

    texts = [" ".join(p) for p in prompts]
    encoded = tokenizer(texts)["input_ids"]
    width = max(len(e) for e in encoded)  # the padded batch's width
    copies = k  # rows per prompt: 1 (greedy), k beams or k samples; row r belongs to prompt r // copies
    beams = 1 if sample else k
    room = model.config.n_positions - width
    if room < 2:
        raise ValueError(f"the prompt of {task.task_name} has {width} tokens; the model reads at most "
                         f"{model.config.n_positions}")
    if beams == 1 and supports(model):  # the fast path (tlm.service.decoding): same words, same scores
        return decode_constrained(model, tokenizer, prompts,
                                  lambda i, new: legal_next_tokens(prompts[i] + new, task, hardware, healthy=healthy),
                                  copies=copies, sample=sample, seed=seed, max_new=room, label=task.task_name,
                                  encoded=encoded, temperature=temperature)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    proc = make_logits_processor(tokenizer, task, hardware, [p for p in prompts for _ in range(copies)], width,
                                 healthy=healthy)
    model.eval()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # sampling draws from the whole (constrained) distribution; greedy and beams take no such flags
        how = {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": temperature} if sample else {"do_sample": False}
        gen = model.generate(**batch, logits_processor=[proc], num_beams=beams, num_return_sequences=copies,
                             max_new_tokens=room, use_cache=True, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, early_stopping=beams > 1,
                             return_dict_in_generate=True, output_logits=beams == 1, **how)
    seqs = gen.sequences
    # greedy and sampled: each chosen word's log-probability under the model's raw (unmasked)
    # distribution, from the logits generate already computed; beams are re-scored by decision_logprobs
    steps = torch.log_softmax(torch.stack(gen.logits, 1).float(), -1) if beams == 1 else None
    rows = []
    for r in range(seqs.shape[0]):
        ids = seqs[r, width:].tolist()
        new = tokenizer.convert_ids_to_tokens(ids)
        if EOS not in new:
            raise ValueError(f"{task.task_name}: a schedule did not finish within {room} words "
                             f"(the model's context is too short for this task)")
        end = new.index(EOS) + 1
        score = None
        if steps is not None:
            score = (float(steps[r, torch.arange(end), torch.tensor(ids[:end])].sum()), end)
        rows.append((r // copies, [w for w in new[:end] if w != PAD], score))
    return rows


def measure_candidates(task: Task, hardware: Hardware, generation: Generation, *, model_id: str,
                       top: int | None = None, config: Any = None,
                       on_records: Callable[[list], None] | None = None) -> list:
    """Build, run and check the ``top`` best candidates (all by default) on this host with the
    collectors' builder and runner, as a search's candidates are: each candidate gets its
    ``latency_s`` or ``error``, and the records (tuner ``tlm:<model_id>``, in candidate order)
    are returned and handed to ``on_records`` (e.g. ``Corpus.append``: the closed loop).
    Raises ``NotRunnableHere`` when this host cannot run code for ``hardware``."""
    from collectors.tuner import measure_schedules

    chosen = generation.candidates[: top or len(generation.candidates)]
    records: list = []
    t0 = time.perf_counter()
    measure_schedules(task, hardware, [c.schedule for c in chosen], tuner=tuner_name(model_id), config=config,
                      on_records=records.extend)
    generation.measure_s += time.perf_counter() - t0
    if len(records) != len(chosen):
        raise RuntimeError(f"{task.task_name}: {len(chosen)} candidates measured but {len(records)} records came back")
    for c, r in zip(chosen, records):
        c.latency_s, c.error = r.latency_s, r.error
    if on_records is not None and records:
        on_records(records)
    return records


def tuner_name(model_id: str) -> str:
    """The ``tuner`` column of a record the model's schedule produced: ``tlm:<model id>``."""
    return f"tlm:{model_id}"
