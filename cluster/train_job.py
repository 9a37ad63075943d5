"""The training job: a Ray Train V2 ``TorchTrainer`` over the sentence Parquet, then the registry.

``run_training`` reads ``pretrain.parquet`` (stage ``pretrain``: sampled programs of every
hardware) or ``finetune.parquet`` (stage ``finetune``: one hardware's fastest measured
schedules) written by ``tlm dataset build``, hands its ``train`` and ``test`` splits to Ray Data
(``ray.train.get_dataset_shard`` in the workers), runs :func:`tlm.model.train.train_loop_per_worker`
on ``workers`` DDP workers (gloo on CPU, nccl on GPU), copies the last checkpoint to
``<out_dir>/<model id>/`` (weights, tokenizer, config: no optimizer state) and registers it.

Resume: the Ray Train run is ``<storage>/<name>``; starting the same name again restores its
newest complete checkpoint (Ray's ``get_checkpoint``, or a newer one on disk that Ray had not
recorded when the run died: :func:`tlm.model.checkpoint.newest_complete`), and the model shape,
tokenizer and training config are read back from ``job.json`` there, so a resumed run cannot
silently change them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from tlm.model.train import TrainConfig

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
MODEL_FILES = ("config.json", "model.safetensors", "generation_config.json", "tlm_model.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass
class TrainJob:
    """Where the data comes from, where models go, and how many workers train."""

    dataset_dir: str  # written by `tlm dataset build` (pretrain.parquet / finetune.parquet)
    out_dir: str = "models"  # finished models: <out_dir>/<model id>/
    storage_path: str | None = None  # Ray Train runs and checkpoints (default <out_dir>/.train-runs)
    name: str | None = None  # run name = model id; starting the same name again resumes it
    workers: int = 2  # DDP workers
    gpu: bool = False  # one GPU per worker (nccl) instead of CPU (gloo)
    hardware_key: str | None = None  # finetune: that hardware's rows; pretrain: None = every hardware
    #: finetune on several keys at once (one model for all of them; the prompt's hardware words tell
    #: them apart): their rows; when set, ``hardware_key`` is None and the model names no single key
    hardware_keys: tuple[str, ...] = ()
    base_path: str | None = None  # finetune: the model directory it starts from
    base_model_id: str | None = None  # finetune: the registered id of the base (for the registry)
    corpus: str | None = None  # corpus root whose index registers the model (None: not registered)
    index_url: str | None = None  # SQL index URL of that corpus
    max_failures: int = 0  # worker failures Ray Train recovers from within one run
    address: str | None = None  # Ray cluster address (None: a local Ray)


@dataclass
class TrainResult:
    model_id: str
    path: str
    metrics: dict = field(default_factory=dict)
    wall_s: float = 0.0


def data_file(dataset_dir: str, stage: str) -> str:
    from tlm.model.dataset import FINETUNE_FILE, PRETRAIN_FILE

    path = os.path.abspath(os.path.join(dataset_dir, PRETRAIN_FILE if stage == "pretrain" else FINETUNE_FILE))
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist; write it with `tlm dataset build --out {dataset_dir}`")
    return path


def keys_of(job: TrainJob) -> tuple[str, ...]:
    """The hardware keys whose rows a job learns (empty: every key, as pretraining does)."""
    return job.hardware_keys or ((job.hardware_key,) if job.hardware_key else ())


def read_rows(path: str, hardware_keys: tuple[str, ...]) -> dict[str, list[dict]]:
    """``{"train": [...], "test": [...]}`` rows (text, prompt_len, label) of one stage's file,
    of these hardware keys (empty: all)."""
    import pyarrow.parquet as pq

    cols = ["text", "prompt_len", "label", "split", "hardware_key"]
    rows = pq.read_table(path, columns=cols).to_pylist()
    if hardware_keys:
        rows = [r for r in rows if r["hardware_key"] in hardware_keys]
    out: dict[str, list[dict]] = {"train": [], "test": []}
    for r in rows:
        out.setdefault(r["split"], []).append({k: r[k] for k in ("text", "prompt_len", "label")})
    return out


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare(cfg: TrainConfig, job: TrainJob) -> dict:
    """Everything a run needs, computed once and stored as ``job.json`` in the run directory.

    Raises ``ValueError`` when the data has no training rows for the stage/hardware asked, or
    a fine-tuning sentence is longer than the base model can read.
    """
    from tlm.model.dataset import built_with
    from tlm.model.network import ModelConfig, model_config, read_model_info
    from tlm.model.tokenizer import build_tokenizer, extend_tokenizer, language_vocabulary, load_tokenizer

    path = data_file(job.dataset_dir, cfg.stage)
    built = built_with(path)
    held_out = list(built.held_out_models)
    keys = keys_of(job)
    rows = read_rows(path, keys)
    if not rows["train"]:
        where = f" for hardware {', '.join(keys)}" if keys else ""
        raise ValueError(f"{path} has no training sentences{where}; collect or build more data first")
    longest = max(len(r["text"].split()) for split in rows.values() for r in split)
    run_dir = os.path.join(job.storage_path, job.name)
    tok_dir = os.path.join(run_dir, "tokenizer")
    if cfg.stage == "finetune":
        if not job.base_path:
            raise ValueError("fine-tuning needs a base model (--base)")
        mcfg = ModelConfig(**read_model_info(job.base_path)["model_config"])
        tokenizer = load_tokenizer(job.base_path)
        if built.language < mcfg.language:
            raise ValueError(f"{path} is written in language version {built.language}, but the base model reads "
                             f"version {mcfg.language}: rebuild it with `tlm dataset build --language {mcfg.language}`")
        if built.language > mcfg.language:  # the base learns the newer version's words (train.grow_vocabulary)
            tokenizer = extend_tokenizer(tokenizer, language_vocabulary())
            mcfg = replace(mcfg, language=built.language, vocab_size=len(tokenizer))
        if longest > mcfg.n_positions:
            raise ValueError(f"a fine-tuning sentence has {longest} tokens but the base model reads at "
                             f"most {mcfg.n_positions}; pretrain a base with a longer context")
        if cfg.layers > mcfg.n_layer:
            raise ValueError(f"--layers {cfg.layers}: the base model has {mcfg.n_layer} blocks")
        if cfg.layers:
            mcfg = replace(mcfg, n_layer=cfg.layers)
    else:
        extra = {w for r in rows["train"] for w in r["text"].split()[: r["prompt_len"]]}
        tokenizer = build_tokenizer(extra)
        mcfg = replace(model_config(cfg.preset, tokenizer, longest), language=built.language)
    os.makedirs(run_dir, exist_ok=True)
    tokenizer.save_pretrained(tok_dir)
    per_epoch = len(rows["train"]) // (cfg.batch_size * job.workers)
    if per_epoch < 1:
        raise ValueError(f"{len(rows['train'])} training sentences are fewer than one batch per worker "
                         f"({cfg.batch_size} x {job.workers}); lower --batch-size or --workers")
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * per_epoch))
    digest = _sha256(path)
    spec = {
        "train": asdict(cfg), "model_config": asdict(mcfg), "tokenizer_dir": tok_dir,
        "total_steps": total, "steps_per_epoch": per_epoch, "base_model_path": job.base_path,
        "rows": {k: len(v) for k, v in rows.items()}, "data_file": path, "data_sha256": digest,
        # what the model records about itself: relative names only (a shipped model must not
        # carry a path of the machine it was trained on) and the models it never saw
        "info": {"stage": cfg.stage, "hardware_key": job.hardware_key, "hardware_keys": list(keys),
                 "base_model_id": job.base_model_id,
                 "data_file": os.path.basename(path), "data_sha256": digest, "held_out_models": held_out,
                 "train": asdict(cfg)},
    }
    with open(os.path.join(run_dir, JOB_FILE), "w") as f:
        json.dump(spec, f, indent=2)
    return spec


def _resumable_spec(job: TrainJob) -> dict | None:
    p = os.path.join(job.storage_path, job.name, JOB_FILE)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def run_training(cfg: TrainConfig, job: TrainJob, *,
                 evaluate: Callable[[str], dict] | None = None) -> TrainResult:
    """Train (or resume) through Ray Train, save the model under ``out_dir`` and register it.

    ``evaluate(model_dir) -> metrics`` is the hook the generator fills (e.g. the measured
    latency of the greedy schedules of held-out tasks against the corpus's best); its metrics
    are stored with the model.
    """
    import ray
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from cluster.ray_session import connect
    from cluster.train_session import ray_train_loop

    job.storage_path = os.path.abspath(job.storage_path or os.path.join(job.out_dir, ".train-runs"))
    keys = "+".join(k.removeprefix("cpu-") for k in job.hardware_keys) if job.hardware_keys else None
    job.name = job.name or f"{cfg.stage}-{job.hardware_key or keys or 'all'}-{cfg.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    spec = _resumable_spec(job)
    resume_from = None
    if spec is not None:
        from tlm.model.checkpoint import newest_complete

        # Ray's record of the run may lag its disk by the last checkpoint (tlm.model.checkpoint)
        resume_from = newest_complete(os.path.join(job.storage_path, job.name))
        log.info("resuming run %s from %s (its saved configuration wins; newest complete checkpoint: %s)",
                 job.name, job.storage_path, resume_from)
    else:
        spec = prepare(cfg, job)
    t0 = time.perf_counter()
    started = connect(job.address)
    try:
        datasets = _datasets(spec, keys_of(job))
        cpu_per_worker, threads = _worker_cpus(job.workers, job.gpu)
        trainer = TorchTrainer(
            ray_train_loop,
            train_loop_config={k: spec[k] for k in ("train", "model_config", "tokenizer_dir", "total_steps",
                                                    "steps_per_epoch", "base_model_path", "info")}
            | {"threads": threads, "resume_from": resume_from},
            scaling_config=ScalingConfig(num_workers=job.workers, use_gpu=job.gpu,
                                         resources_per_worker={"CPU": cpu_per_worker}),
            torch_config=TorchConfig(backend="nccl" if job.gpu else "gloo"),
            run_config=RunConfig(name=job.name, storage_path=job.storage_path,
                                 failure_config=FailureConfig(max_failures=job.max_failures),
                                 checkpoint_config=CheckpointConfig(num_to_keep=2)),
            datasets=datasets,
            dataset_config=DataConfig(datasets_to_split="all"),
        )
        result = trainer.fit()
    finally:
        if started:
            ray.shutdown()
    if result.checkpoint is None:
        raise RuntimeError(f"training run {job.name} finished without a checkpoint: {result.error}")
    dest = os.path.abspath(os.path.join(job.out_dir, job.name))
    with result.checkpoint.as_directory() as d:
        export_model(d, dest)
    metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float, str))}
    metrics.update({"rows": spec["rows"], "total_steps": spec["total_steps"], "workers": job.workers,
                    "wall_s": round(time.perf_counter() - t0, 1)})
    if evaluate is not None:
        metrics.update(evaluate(dest))
    _write_metrics(dest, metrics)
    if job.corpus:
        from storage import Corpus

        with Corpus.open(job.corpus, index_url=job.index_url) as corpus:
            corpus.register_model(job.name, path=dest, hardware_key=job.hardware_key,
                                  base_model_id=job.base_model_id,
                                  data_snapshot=f"{os.path.basename(spec['data_file'])}:sha256:{spec['data_sha256'][:16]}",
                                  metrics=metrics)
    return TrainResult(model_id=job.name, path=dest, metrics=metrics, wall_s=time.perf_counter() - t0)


def _datasets(spec: dict, hardware_keys: tuple[str, ...]) -> dict:
    """The ``train`` (and ``test``) Ray Datasets, materialized: the sentence sets are small, and
    reading them before the workers hold the CPUs keeps Ray Data from waiting for a CPU that
    the trainer will never give back (a deadlock on a 2-core machine). Read and split here with
    pyarrow and handed over as Arrow blocks: ``read_parquet`` spent ~14 s on 2 cores starting
    its listing and reading tasks for a file of a few hundred rows."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import ray.data

    table = pq.read_table(spec["data_file"], columns=["text", "prompt_len", "label", "split", "hardware_key"])
    if hardware_keys:
        table = table.filter(pc.is_in(table["hardware_key"], value_set=pa.array(list(hardware_keys), type=pa.string())))
    splits = ["train"] + (["test"] if spec["rows"].get("test") else [])
    return {name: ray.data.from_arrow(table.filter(pc.equal(table["split"], name))) for name in splits}


def _worker_cpus(workers: int, gpu: bool) -> tuple[float, int | None]:
    """``(CPUs reserved per worker, torch threads per worker)``.

    Each worker reserves a whole CPU when the cluster has one to spare beyond them; on a
    machine with no more CPUs than workers they share, leaving one for Ray Data and the
    controller. Threads: this node's cores split between the workers (None on a cluster of
    several nodes, where each worker's node decides).
    """
    import ray

    total = float(ray.cluster_resources().get("CPU", 1))
    per = 1.0 if total >= workers + 1 or gpu else max(0.1, (total - 1) / workers)
    single_node = len([n for n in ray.nodes() if n.get("Alive")]) == 1
    threads = max(1, int((os.cpu_count() or 1) // workers)) if single_node else None
    return round(per, 3), threads


def export_model(checkpoint_dir: str, dest: str) -> str:
    """Copy the model files of a checkpoint (not its optimizer state) to ``dest`` (must not exist)."""
    if os.path.exists(dest):
        raise FileExistsError(f"{dest} exists; the default never overwrites a model")
    os.makedirs(dest)
    for name in MODEL_FILES:
        src = os.path.join(checkpoint_dir, name)
        if os.path.exists(src):
            shutil.copy2(src, os.path.join(dest, name))
    return dest


def _write_metrics(dest: str, metrics: dict) -> None:
    from tlm.model.network import MODEL_CONFIG_FILE

    p = os.path.join(dest, MODEL_CONFIG_FILE)
    with open(p) as f:
        info = json.load(f)
    info["final_metrics"] = metrics
    with open(p, "w") as f:
        json.dump(info, f, indent=2, sort_keys=True)
