"""Training sets of sentences, built from a corpus.

Two sets, as the original TLM trains, written as Parquet (readable by
``ray.data.read_parquet`` and plain pyarrow):

* ``pretrain.parquet``: valid programs *sampled* from every task's design space on every
  hardware of the corpus (cheap, unmeasured; TVM samples each sketch's decisions). They
  teach the model the grammar and the shape of legal decisions.
* ``finetune.parquet``: the fastest measured schedules per (task, hardware, sketch) — the
  ``top_k`` successful records by latency — with ``label`` = best latency of the task on that
  hardware / this record's latency (1.0 for the best). With ``rules``, the rule baseline's
  programs of every training workload follow them (source ``rules``, :func:`rule_rows`).

Both carry a ``split`` column: a workload that occurs in any held-out model (storage's
``workload_models`` table) is ``test``, every other workload is ``train``, so a held-out model
is unseen as a whole. Tasks are rebuilt from the index (``mod_json`` when stored, else the
TVMScript); a record the language cannot express is skipped and counted, never fatal.
"""
from __future__ import annotations

import json
import logging
import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from collectors.hardware import Hardware
from collectors.tasks import Task
from collectors.zoo import HELD_OUT_MODELS

logger = logging.getLogger(__name__)

PRETRAIN_FILE = "pretrain.parquet"
FINETUNE_FILE = "finetune.parquet"
#: Parquet schema metadata key holding the DatasetConfig a set was built with (JSON).
CONFIG_KEY = b"tlm.dataset_config"


@dataclass
class DatasetConfig:
    """What to put into the training sets."""

    pretrain_per_sketch: int = 8  # random valid programs sampled per sketch and hardware
    finetune_top_k: int = 4  # fastest successful records kept per (task, hardware, sketch); 0: every one
    held_out_models: tuple[str, ...] = HELD_OUT_MODELS  # whole models whose workloads form the test split
    hardware_keys: tuple[str, ...] = ()  # only these hardware keys (empty: every one in the corpus)
    seed: int = 0  # seeds the design-space sampling
    language: int = 1  # prompt grammar version of its sentences (tlm.language.LANGUAGE_VERSIONS; absent: 1)
    # only records measured before this ISO-8601 instant (None: every one): a shipped model's set
    # rebuilt exactly from a corpus that has grown since (a round going on after it was trained)
    measured_before: str | None = None
    # the rule baseline's programs (its own and its second opinions, ``collectors.rules``) of every
    # training workload on a CPU key, as fine-tuning rows after the measured ones (:func:`rule_rows`)
    rules: bool = False
    # the measured rows of the training split written this many times: with ``rules`` they are
    # outnumbered by the rules' rows, and the teacher's programs must still be fitted
    measured_repeats: int = 1
    # with ``rules``: no rules rows for a (workload, sketch) the teacher measured, so every prompt
    # has one answer. Why: a convolution's sketch had the teacher's program twice beside the rules'
    # four, and the student wrote none of its teacher's programs on the workloads it learnt from
    # (measured: no gain at 16 epochs; bench/results/levers.md, item 3-6s)
    rules_unmeasured_only: bool = False


@dataclass
class BuildSummary:
    """What a build wrote and what it had to skip."""

    out_dir: str
    pretrain_rows: int = 0
    finetune_rows: int = 0
    tasks: int = 0
    hardware: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count


def load_tasks(corpus: Any) -> dict[str, tuple[Task, list[str]]]:
    """workload_key -> (Task rebuilt from the index, models it occurs in); a workload whose
    module cannot be loaded is skipped with a warning."""
    from collectors.tasks import task_from_index

    out = {}
    for w in corpus.workloads():
        try:
            task = task_from_index(w)
        except ValueError as exc:
            logger.warning("%s: skipped", exc)
            continue
        out[w["workload_key"]] = (task, sorted(w.get("models") or {}))
    return out


def load_hardware(corpus: Any, keys: Iterable[str]) -> dict[str, Hardware]:
    """hardware_key -> Hardware rebuilt from the index's target and description."""
    from collectors.hardware import hardware_for_key

    out = {}
    for key in keys:
        info = corpus.hardware_info(key)
        if info is None or not info.get("target"):
            logger.warning("hardware %s is not registered with a target: skipped", key)
            continue
        out[key] = hardware_for_key(key, info)
    return out


def built_with(path: str) -> DatasetConfig:
    """The :class:`DatasetConfig` a sentence set (``pretrain.parquet`` / ``finetune.parquet``)
    was built with, from its Parquet metadata: what a model trained on it was held out from."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    if CONFIG_KEY not in meta:
        raise ValueError(f"{path} has no {CONFIG_KEY.decode()} metadata: not written by `tlm dataset build`")
    fields = json.loads(meta[CONFIG_KEY])
    return DatasetConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def split_of(models: Sequence[str], held_out: Sequence[str]) -> str:
    """``test`` when the workload occurs in any held-out model, else ``train``."""
    return "test" if set(models) & set(held_out) else "train"


def _row(sentence: Any, task: Task, hw: Hardware, split: str, source: str, latency: float | None = None,
         label: float | None = None, record_id: str | None = None) -> dict:
    return {
        "text": sentence.text, "prompt_len": sentence.prompt_len, "n_tokens": len(sentence.tokens),
        "workload_key": task.workload_key, "hardware_key": hw.key, "task_name": task.task_name,
        "op_kind": task.op_kind, "sketch_id": sentence.sketch_id, "split": split, "source": source,
        "latency_s": latency, "label": label, "record_id": record_id,
    }


#: MetaSchedule samples tried per pretraining sentence before a sketch is given up.
SAMPLE_ATTEMPTS = 4


def pretrain_rows(task: Task, hw: Hardware, per_sketch: int, split: str, seed: int = 0,
                  language: int = 1) -> list[dict]:
    """Sentences of up to ``per_sketch`` random valid programs of every live sketch.

    MetaSchedule samples the decisions (its own distribution, as TLM pretrains); a sample the
    target's postprocessors refuse (on CUDA: thread, shared-memory or pipeline limits) is not
    a valid program and is dropped, so at most ``SAMPLE_ATTEMPTS * per_sketch`` are tried.
    """
    from tvm.s_tir.schedule import Schedule, Trace

    from tlm.language import encode, live_sketches
    from collectors.sketches import refusing_postproc
    from tlm.language.space import build_space

    rows, seen = [], set()
    space = build_space(task, hw)
    for sk in live_sketches(space):
        kept = 0
        for j in range(SAMPLE_ATTEMPTS * per_sketch):
            if kept == per_sketch:
                break
            sch = Schedule(task.mod, seed=seed * 100003 + sk.sketch_id * 1009 + j + 1)
            Trace(sk.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            trace = sch.trace
            if refusing_postproc(sch, task, hw) is not None:
                continue
            kept += 1
            s = encode(task, hw, trace, language=language)
            if s.text not in seen:  # identical samples teach nothing twice
                seen.add(s.text)
                rows.append(_row(s, task, hw, split, "sampled"))
    return rows


def finetune_rows(records: Sequence[dict], task: Task, hw: Hardware, top_k: int, split: str,
                  skipped: Counter, language: int = 1) -> list[dict]:
    """The ``top_k`` fastest successful records of each sketch of one task on one hardware
    (``top_k == 0``: every successful record, each labelled with its speed relative to the best)."""
    from tlm.language import LanguageError, encode

    ok = [r for r in records if r.get("latency_s") is not None and not r.get("error")]
    ok.sort(key=lambda r: (r["latency_s"], r.get("record_id") or ""))
    if not ok:
        return []
    best = ok[0]["latency_s"]
    per_sketch: dict[int, int] = defaultdict(int)
    rows = []
    for r in ok:
        try:
            s = encode(task, hw, r["trace_json"], language=language)
        except LanguageError as exc:
            skipped[f"not expressible: {exc.reason[:60]}"] += 1
            continue
        if top_k and per_sketch[s.sketch_id] >= top_k:
            continue
        per_sketch[s.sketch_id] += 1
        rows.append(_row(s, task, hw, split, "measured", r["latency_s"], best / r["latency_s"], r.get("record_id")))
    return rows


def rule_rows(task: Task, hw: Hardware, split: str, skipped: Counter, language: int = 1) -> list[dict]:
    """The rule baseline's programs of one task (``collectors.rules.rule_variants``: its own, then
    its second opinions, each sentence once) as rows of source ``rules`` (label 1, no latency).

    Why: a student fine-tuned on the teacher alone (the search's fastest record per sketch, a
    few hundred rows) writes programs of held-out workloads no better than the random programs
    it was pretrained on; the rules are one consistent function of the shape and the CPU, defined
    on every workload, and as fast as MetaSchedule@256 on the held-out ones. Learnt beside the
    teacher, the held-out greedy program went from 0.43x to 0.70x the teacher (Rocket Lake key,
    ``bench/results/levers.md``, item 3-6r). A task the rules give no program (or none the
    language can say) is counted in ``skipped``."""
    from collectors.rules import rule_variants
    from tlm.language import LanguageError, encode

    if hw.kind != "cpu":
        return []
    try:
        programs = rule_variants(task, hw)
    except ValueError:
        skipped["rules: no program"] += 1
        return []
    rows, seen = [], set()
    for p in programs:
        try:
            s = encode(task, hw, p.schedule.trace, language=language)
        except LanguageError as exc:
            skipped[f"rules: not expressible: {exc.reason[:60]}"] += 1
            continue
        if s.text not in seen:
            seen.add(s.text)
            rows.append(_row(s, task, hw, split, "rules", None, 1.0))
    return rows


def _unmeasured(ruled: list[dict], fine: list[dict], skipped: Counter) -> list[dict]:
    """The rules rows of the (workload, hardware, sketch) groups no measured training row answers."""
    measured = {(r["workload_key"], r["hardware_key"], r["sketch_id"]) for r in fine if r["split"] == "train"}
    kept = [r for r in ruled if (r["workload_key"], r["hardware_key"], r["sketch_id"]) not in measured]
    if len(kept) < len(ruled):
        skipped["rules: the teacher measured this sketch"] += len(ruled) - len(kept)
    return kept


def build_datasets(corpus: Any, out_dir: str, config: DatasetConfig | None = None, *,
                   progress: bool = True, workers: int = 1) -> BuildSummary:
    """Write ``pretrain.parquet`` and ``finetune.parquet`` under ``out_dir`` (never overwrites).

    ``workers > 1`` samples the pretraining programs in that many processes (TVM's sampling is
    single-threaded Python and C++: ~120 sentences/s a core); the rows are the same, in the same
    order, as with one.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tqdm import tqdm


    from tlm.language import LANGUAGE_VERSIONS

    config = config or DatasetConfig()
    if config.language not in LANGUAGE_VERSIONS:
        raise ValueError(f"unknown language version {config.language}; known: {', '.join(map(str, LANGUAGE_VERSIONS))}")
    if config.measured_repeats < 1:
        raise ValueError(f"measured_repeats must be >= 1, got {config.measured_repeats}")
    os.makedirs(out_dir, exist_ok=True)
    for name in (PRETRAIN_FILE, FINETUNE_FILE):
        if os.path.exists(os.path.join(out_dir, name)):
            raise FileExistsError(f"{os.path.join(out_dir, name)} exists; choose a new output directory")
    cutoff = measured_before(config)
    tasks = load_tasks(corpus)
    keys = config.hardware_keys or tuple(sorted(corpus.stats()["by_hardware"]))
    hardware = load_hardware(corpus, keys)
    summary = BuildSummary(out_dir=out_dir, tasks=len(tasks), hardware=sorted(hardware))
    skipped: Counter = Counter()
    pre, fine, ruled = [], [], []
    cols = ["record_id", "workload_key", "trace_json", "latency_s", "error", "created_at"]
    for hk, hw in hardware.items():
        table = corpus.scan({"hardware_key": hk}, columns=cols)
        by_task: dict[str, list[dict]] = defaultdict(list)
        for r in table.to_pylist():
            if cutoff is not None and r["created_at"] >= cutoff:
                skipped[f"measured at or after {config.measured_before}"] += 1
                continue
            by_task[r["workload_key"]].append(r)
        order = sorted(tasks.items())
        splits = [split_of(models, config.held_out_models) for _, (_, models) in order]
        if config.pretrain_per_sketch and workers > 1:
            sampled = _sample_in_pool(corpus, [wk for wk, _ in order], splits, hk, config, workers, progress)
        else:
            sampled = None
        for i, (wk, (task, models)) in enumerate(tqdm(order, desc=f"sentences {hk}", disable=not progress)):
            try:
                if sampled is None:
                    pre += pretrain_rows(task, hw, config.pretrain_per_sketch, splits[i], config.seed,
                                         config.language)
                else:
                    rows, failure = sampled[i]
                    if failure is not None:
                        raise RuntimeError(failure)
                    pre += rows
                fine += finetune_rows(by_task.get(wk, []), task, hw, config.finetune_top_k, splits[i], skipped,
                                      config.language)
                if config.rules and splits[i] == "train":
                    ruled += rule_rows(task, hw, splits[i], skipped, config.language)
            except Exception as exc:  # noqa: BLE001 - one bad task never stops a build
                skipped[f"task failed: {type(exc).__name__}"] += 1
                logger.warning("task %s on %s skipped: %s", task.task_name, hk, str(exc)[:300])
    schema = pa.schema([
        ("text", pa.string()), ("prompt_len", pa.int32()), ("n_tokens", pa.int32()),
        ("workload_key", pa.string()), ("hardware_key", pa.string()), ("task_name", pa.string()),
        ("op_kind", pa.string()), ("sketch_id", pa.int32()), ("split", pa.string()), ("source", pa.string()),
        ("latency_s", pa.float64()), ("label", pa.float64()), ("record_id", pa.string()),
    ])
    if config.rules_unmeasured_only:
        ruled = _unmeasured(ruled, fine, skipped)
    fine += [r for r in fine if r["split"] == "train"] * (config.measured_repeats - 1) + ruled
    meta = {CONFIG_KEY: json.dumps(asdict(config)).encode()}
    for name, rows in ((PRETRAIN_FILE, pre), (FINETUNE_FILE, fine)):
        tab = pa.Table.from_pylist(rows, schema=schema).replace_schema_metadata(meta)
        tmp = os.path.join(out_dir, f".{name}.tmp")
        pq.write_table(tab, tmp)
        os.replace(tmp, os.path.join(out_dir, name))
    summary.pretrain_rows, summary.finetune_rows = len(pre), len(fine)
    summary.skipped = dict(skipped)
    logger.info("wrote %d pretraining and %d fine-tuning sentences to %s", len(pre), len(fine), out_dir)
    return summary


def measured_before(config: DatasetConfig) -> Any:
    """``config.measured_before`` as an aware UTC datetime (None: no cutoff); raises ``ValueError``
    naming the value when it is not an ISO-8601 instant (a time without a zone is UTC)."""
    import datetime as dt

    if config.measured_before is None:
        return None
    try:
        t = dt.datetime.fromisoformat(config.measured_before.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"measured_before {config.measured_before!r} is not an ISO-8601 instant "
                         f"(e.g. 2026-12-05T00:16:45Z)") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def _sample_task(job: tuple) -> tuple[list[dict], str | None]:
    """One task's pretraining rows in a pool process: ``(rows, None)`` or ``([], failure)``.

    The job carries the index rows (plain data), not TVM objects, so it crosses processes."""
    from collectors import fast_import
    from collectors.hardware import hardware_for_key
    from collectors.tasks import task_from_index

    workload, hardware_key, hardware_info, per_sketch, split, seed, language = job
    try:
        hw = hardware_for_key(hardware_key, hardware_info)
        fast_import.install_for_target(hw.target)  # a fresh process: the CPU intrinsics alone
        return pretrain_rows(task_from_index(workload), hw, per_sketch, split, seed, language), None
    except Exception as exc:  # noqa: BLE001 - reported by the caller as a skipped task
        return [], f"{type(exc).__name__}: {str(exc)[:300]}"


def _sample_in_pool(corpus: Any, keys: Sequence[str], splits: Sequence[str], hardware_key: str,
                    config: DatasetConfig, workers: int, progress: bool) -> list[tuple[list[dict], str | None]]:
    """:func:`pretrain_rows` of every task in ``keys``, in ``workers`` spawned processes, in order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    rows = {w["workload_key"]: dict(w) for w in corpus.workloads()}
    info = dict(corpus.hardware_info(hardware_key))
    jobs = [(rows[k], hardware_key, info, config.pretrain_per_sketch, s, config.seed, config.language)
            for k, s in zip(keys, splits)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(tqdm(pool.map(_sample_task, jobs), total=len(jobs), desc=f"sampled programs {hardware_key}",
                         disable=not progress))


def dataset_stats(out_dir: str, tokenizer: Any | None = None, *, bins: Sequence[int] = (64, 128, 256, 512, 1024, 2048)) -> dict:
    """Sizes, token-length histograms and vocabulary coverage of the sets in ``out_dir``."""
    import pyarrow.parquet as pq

    from tlm.model.tokenizer import build_tokenizer

    tokenizer = tokenizer or build_tokenizer()
    vocab = tokenizer.get_vocab()
    out: dict[str, Any] = {"vocabulary_size": len(vocab)}
    for name in (PRETRAIN_FILE, FINETUNE_FILE):
        path = os.path.join(out_dir, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist; run `tlm dataset build` first")
        tab = pq.read_table(path, columns=["text", "n_tokens", "split", "op_kind", "prompt_len"])
        lengths = tab.column("n_tokens").to_pylist()
        hist: dict[str, int] = {}
        lo = 0
        for hi in bins:
            hist[f"{lo + 1}-{hi}"] = sum(lo < n <= hi for n in lengths)
            lo = hi
        hist[f">{lo}"] = sum(n > lo for n in lengths)
        words, unknown, used = 0, Counter(), set()
        dec_words, dec_unknown = 0, 0
        for text, plen in zip(tab.column("text").to_pylist(), tab.column("prompt_len").to_pylist()):
            ws = text.split()
            words += len(ws)
            used.update(ws)
            for i, w in enumerate(ws):
                if w not in vocab:
                    unknown[w] += 1
                    dec_unknown += i >= plen
            dec_words += len(ws) - plen
        by_kind: dict[str, list[int]] = defaultdict(list)
        for k, n in zip(tab.column("op_kind").to_pylist(), lengths):
            by_kind[k or "unknown"].append(n)
        out[name] = {
            "rows": tab.num_rows,
            "splits": dict(Counter(tab.column("split").to_pylist())),
            "tokens_mean": round(sum(lengths) / len(lengths), 1) if lengths else 0,
            "tokens_max": max(lengths) if lengths else 0,
            "length_histogram": hist,
            "by_op_kind": {k: {"rows": len(v), "mean": round(sum(v) / len(v), 1), "max": max(v)}
                           for k, v in sorted(by_kind.items())},
            "word_coverage": round(1 - sum(unknown.values()) / words, 6) if words else 1.0,
            "decision_word_coverage": round(1 - dec_unknown / dec_words, 6) if dec_words else 1.0,
            "vocabulary_used": len(used & set(vocab)),
            "unknown_words": dict(unknown.most_common(10)),
        }
    return out
