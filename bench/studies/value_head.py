"""A value head on the TLM's hidden states (issue 19, item 3's other ranker), judged on a measured pool.

    .venv/bin/python -m bench.studies.value_head --model DIR --dataset SETS --pools POOLS.json --cost-model DIR

The cost model ranks by MetaSchedule's hand-made per-store features. The TLM itself reads every
decision of a program in the context of its task and hardware; if its hidden states know which
programs are fast, a linear head on them ranks without features. This fits that head and
judges it the way ``bench/studies/rankers.py`` judges a ranking: on every program of a pool that
``bench/studies/pools.py`` measured whole.

- Each sentence of ``SETS/finetune.parquet`` (``tlm dataset build --top-k 100000 --per-sketch 0``:
  every successful record of every key, the training split only) is embedded as the mean of the
  model's last hidden states over its decision words, beside the state at its last word.
- The head is ridge regression of log(best / latency) *within* each (workload, key) group (group
  means removed from both sides: only the order of a task's programs is learned, not how heavy a
  task is), its penalty chosen on a tenth of the training groups set aside.
- On the pool, its top-1 (and the sum of its z-score with the cost model's) against MS@256.
Writes JSON (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from bench._common import RESULTS
from bench.studies.rankers import _z, measured_pools, picks, write


def embed(model: Any, tokenizer: Any, texts: list[str], prompt_lens: list[int], *, batch_size: int = 32) -> np.ndarray:
    """Per sentence: mean of the last hidden states over its decision words, and the last word's."""
    import torch

    from tlm.model.batching import IGNORE, batch_encoding, encode_batch

    enc = batch_encoding(tokenizer, model.config.n_positions)
    out = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            b = encode_batch(texts[i: i + batch_size], prompt_lens[i: i + batch_size], **enc)
            h = model.transformer(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
            dec = (b["labels"] != IGNORE).float()[..., None]
            mean = (h * dec).sum(1) / dec.sum(1).clamp_min(1)
            last = h[torch.arange(h.shape[0]), b["attention_mask"].sum(1) - 1]
            out.append(torch.cat([mean, last], -1).numpy())
    return np.concatenate(out).astype("float64")


def demean(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``x`` less its group's mean, row by row."""
    _, inv = np.unique(groups, return_inverse=True)
    sums = np.zeros((inv.max() + 1,) + x.shape[1:])
    np.add.at(sums, inv, x)
    counts = np.bincount(inv).reshape((-1,) + (1,) * (x.ndim - 1))
    return x - (sums / counts)[inv]


def fit_ridge(x: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """Ridge weights (no intercept: both sides are demeaned within groups)."""
    return np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ y)


def spearman_in_groups(score: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """Mean over groups of Spearman's rank correlation."""
    from collectors.cost_model import spearman

    vals = [spearman(score[groups == g], y[groups == g]) for g in np.unique(groups) if (groups == g).sum() >= 5]
    return float(np.mean(vals))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True, help="a `tlm dataset build --top-k 100000` directory")
    ap.add_argument("--pools", required=True, help="a bench/studies/pools.py JSON with candidates (this host's key)")
    ap.add_argument("--pool", default="samples_32")
    ap.add_argument("--cost-model", required=True, help="the cost model to compare and blend with")
    ap.add_argument("--keys", default="", help="comma-separated keys to train on (default: every key)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "value_head.json"))
    args = ap.parse_args()

    import pyarrow.parquet as pq

    import collectors.fast_import as fast_import
    from collectors.cost_model import CostModel
    from collectors.hardware import detect_hardware
    from tlm.model.network import load_model

    fast_import.install()
    hw = detect_hardware("cpu")
    model, tok, _ = load_model(args.model)
    rows = [r for r in pq.read_table(os.path.join(args.dataset, "finetune.parquet")).to_pylist()
            if r["split"] == "train" and r["label"] and (not args.keys or r["hardware_key"] in args.keys.split(","))]
    t0 = time.time()
    x = embed(model, tok, [r["text"] for r in rows], [r["prompt_len"] for r in rows])
    embed_s = time.time() - t0
    print(f"embedded {len(rows)} sentences in {embed_s:.0f} s", flush=True)
    y = np.log(np.clip([r["label"] for r in rows], 1e-3, 1.0))
    groups = np.asarray([f"{r['workload_key']}@{r['hardware_key']}" for r in rows])
    xc, yc = demean(x, groups), demean(y, groups)
    uniq = np.unique(groups)
    val = np.isin(groups, np.random.default_rng(0).choice(uniq, size=max(1, len(uniq) // 10), replace=False))
    choice = {}
    for lam in (1e-2, 1e-1, 1.0, 10.0, 100.0):
        w = fit_ridge(xc[~val], yc[~val], lam)
        choice[lam] = spearman_in_groups(x[val] @ w, y[val], groups[val])
    lam = max(choice, key=choice.get)
    w = fit_ridge(xc, yc, lam)
    print(f"ridge penalty {lam} (validation Spearman {json.dumps({str(k): round(v, 3) for k, v in choice.items()})})")

    cm = CostModel.load(args.cost_model)
    out_rows = []
    for p in measured_pools(args.pools, args.pool, hw):
        texts = [c["text"] for c in p.candidates]
        head = embed(model, tok, texts, [len(t.split()) - c["n_tokens"] for t, c in zip(texts, p.candidates)]) @ w
        cost = cm.score(p.features)
        scores = {"cost_model": cost, "value_head": head, "value_head+cost_model": _z(head) + _z(cost)}
        row = {"task": p.task.task_name, "size": len(p.candidates), "fastest": float(p.speeds.max()),
               "spearman": {k: float(spearman_in_groups(s, p.speeds, np.zeros(len(s)))) for k, s in scores.items()},
               "rankers": {k: picks(s, p.speeds) for k, s in scores.items()}}
        out_rows.append(row)
        print(row["task"], {k: round(v["top1"], 2) for k, v in row["rankers"].items()}, flush=True)
    write({"hardware": hw.key, "model": args.model, "dataset_rows": len(rows), "keys": args.keys or "all",
           "embed_s": round(embed_s, 1), "ridge_penalty": lam,
           "validation_spearman": {str(k): v for k, v in choice.items()}, "pools": args.pools,
           "cost_model": args.cost_model}, out_rows, args.out)


if __name__ == "__main__":
    main()
