"""Training throughput of the ``small`` TLM on this CPU: the bare loop vs Ray Train, 1 vs 2 workers.

    .venv/bin/python -m bench.train --dataset DIR [--steps 40] [--batch-size 8]

Side by side in one run, on the same sentences (``DIR/pretrain.parquet``, train split) and
the same number of optimizer steps:

* ``bare``: :func:`tlm.model.train.train_loop_per_worker` in this process (LocalSession, 1 worker,
  every core);
* ``ray_1``, ``ray_2``: ``cluster.train_job.run_training`` (TorchTrainer, DDP on gloo) with 1
  and 2 workers.

Reports tokens/s per worker (training steps only), the wall time of each, what Ray Train adds
over the bare loop (start-up, data, checkpoint upload, teardown), and peak memory (this
process's max RSS for ``bare``; the sum over every process of the machine's Ray session,
sampled every 0.2 s, for the Ray runs). JSON to ``bench/results/train.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import threading
import time
from dataclasses import asdict

from bench._common import machine, shipped_path

RESULTS = os.path.join(os.path.dirname(__file__), "results", "train.json")


class PeakRss:
    """Peak summed RSS of the processes whose command line mentions Ray (or this process)."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        me = os.getpid()
        while not self._stop.is_set():
            total = 0
            for p in psutil.process_iter(["pid", "cmdline", "memory_info"]):
                cmd = " ".join(p.info["cmdline"] or [])
                if p.info["pid"] == me or ("ray" in cmd and "Collector" not in cmd and "collect" not in cmd):
                    total += p.info["memory_info"].rss if p.info["memory_info"] else 0
            self.peak = max(self.peak, total)
            self._stop.wait(0.2)

    def __enter__(self) -> "PeakRss":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def bare(dataset: str, cfg, tmp: str) -> dict:
    from cluster.train_job import TrainJob, prepare, read_rows
    from tlm.model.train import LocalSession, train_loop_per_worker

    job = TrainJob(dataset_dir=dataset, storage_path=tmp, name="bare", workers=1)
    spec = prepare(cfg, job)
    rows = read_rows(spec["data_file"], ())
    session = LocalSession({"train": rows["train"]}, os.path.join(tmp, "bare-ckpt"))
    t0 = time.perf_counter()
    train_loop_per_worker({k: spec[k] for k in ("train", "model_config", "tokenizer_dir", "total_steps",
                                                 "steps_per_epoch", "base_model_path", "info")}
                          | {"session": session, "threads": os.cpu_count()})
    wall = time.perf_counter() - t0
    last = session.reports[-1]
    return {"wall_s": round(wall, 2), "tokens_per_s_per_worker": round(last["tokens_per_s_per_worker"], 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "train_rows": len(rows["train"]), "steps": last["step"]}


def on_ray(dataset: str, cfg, tmp: str, workers: int) -> dict:
    from cluster.train_job import TrainJob, run_training

    job = TrainJob(dataset_dir=dataset, out_dir=os.path.join(tmp, f"out{workers}"), name=f"ray{workers}",
                   workers=workers)
    with PeakRss() as mem:
        t0 = time.perf_counter()
        result = run_training(cfg, job)
        wall = time.perf_counter() - t0
    m = result.metrics
    return {"wall_s": round(wall, 2), "tokens_per_s_per_worker": round(m["tokens_per_s_per_worker"], 1),
            "tokens_per_s_total": round(m["tokens_per_s_per_worker"] * workers, 1),
            "peak_rss_mb": round(mem.peak / 2**20, 1), "steps": m["step"]}


def main() -> None:
    from tlm.model.train import TrainConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, help="directory written by `tlm dataset build`")
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
    ap.add_argument("--batch-size", type=int, default=8, help="sentences per worker per step")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    os.environ.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    cfg = TrainConfig(preset=args.preset, max_steps=args.steps, batch_size=args.batch_size,
                      eval_every=args.steps, log_every=10**9)
    res: dict = {"machine": machine(),
                 "config": asdict(cfg), "dataset": shipped_path(args.dataset)}
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        res["bare"] = bare(args.dataset, cfg, tmp)
        print("bare", res["bare"], flush=True)
        for w in (1, 2):
            res[f"ray_{w}"] = on_ray(args.dataset, cfg, tmp, w)
            print(f"ray_{w}", res[f"ray_{w}"], flush=True)
    b, r1, r2 = res["bare"], res["ray_1"], res["ray_2"]
    res["ratios"] = {
        "ray_train_added_s_1_worker": round(r1["wall_s"] - b["wall_s"], 2),
        "ray_1_vs_bare_tokens_per_s": round(r1["tokens_per_s_per_worker"] / b["tokens_per_s_per_worker"], 3),
        "ray_2_vs_ray_1_total_tokens_per_s": round(r2["tokens_per_s_total"] / r1["tokens_per_s_total"], 3),
    }
    res["machine"]["load_avg_1m_end"] = os.getloadavg()[0]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res["ratios"], indent=2))


if __name__ == "__main__":
    main()
