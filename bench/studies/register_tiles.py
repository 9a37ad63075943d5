"""How fast the corpus's measured programs are against the accumulators their register tile holds.

    .venv/bin/python -m bench.studies.register_tiles [--corpus DIR] [--hardware KEY] [--out F]

Static (nothing measured: the corpus's records, read). Why: healthy decoding and the
``register_spill`` failure mode bound the register tile's accumulators by the vector registers
(``collectors.hardware.accumulator_registers``); whether a tile that fills *every* register is
fine is a fact of the CPU, so it is read from the measurements. Per convolution and matmul
workload of the key with at least 20 correct records: each record's accumulators (the register
tile's vectors, ``collectors.failure_modes.LoopShape.accumulators``: spatial elements inside the
innermost reduction loop / the stride-1 factor x its vectors) and its speed against the workload's best
record; per accumulator count (past twice the registers, one row) and split (training, held out): records, geomean
speed, the share within 0.8x of the best, and how many workloads' best record has that count.
The second table (``shared``): the same records of workloads with iterators every input reads
(``collectors.tir.shared_iterators``: depthwise convolutions, batched matmuls), per register-tile
extent over those iterators (``LoopShape.shared_tile``, the ``no_reuse`` mode's count).
Writes JSON (``--out``, default ``bench/results/register_tiles.json``) and prints the tables.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import defaultdict

from bench._common import RESULTS, machine

OUT = os.path.join(RESULTS, "register_tiles.json")
KINDS = ("conv2d", "matmul", "dense", "batch_matmul")


def register_tiles(corpus_dir: str, hardware_key: str, min_records: int = 20) -> dict:
    """The per-accumulator table of the module docstring."""
    from collectors.failure_modes import loop_shape
    from collectors.hardware import hardware_for_key
    from collectors.tasks import task_from_index
    from collectors.tir import schedule_of
    from collectors.zoo import HELD_OUT_MODELS
    from storage import Corpus
    from tlm.model.dataset import split_of

    with Corpus.open(corpus_dir) as corpus:
        hw = hardware_for_key(hardware_key, corpus.hardware_info(hardware_key))
        rows = corpus.scan({"hardware_key": hardware_key},
                           columns=["workload_key", "latency_s", "trace_json"]).to_pylist()
        workloads = {w["workload_key"]: w for w in corpus.workloads()}
    held = {k for k, w in workloads.items() if split_of(list(w["models"]), HELD_OUT_MODELS) == "test"}
    by = defaultdict(list)
    for r in rows:
        if r["latency_s"] is not None and workloads.get(r["workload_key"], {}).get("op_kind") in KINDS:
            by[r["workload_key"]].append(r)
    cells: dict = defaultdict(lambda: {"speeds": [], "best_of": 0})
    shared: dict = defaultdict(lambda: {"speeds": [], "best_of": 0, "workloads": set()})
    cap = 2 * _registers(hw)["vector"]
    for key, recs in by.items():
        if len(recs) < min_records:
            continue
        task = task_from_index(workloads[key])
        fastest = min(r["latency_s"] for r in recs)
        split = "heldout" if key in held else "train"
        seen = []  # (shared tile, speed, best?) of this workload's records
        for r in recs:
            try:
                shape = loop_shape(schedule_of(task.mod, r["trace_json"]).mod, hw)
            except Exception:  # a record this TVM cannot replay: not counted
                continue
            acc = shape.accumulators if shape is not None else None  # as register_spill counts them
            if acc is None:
                continue
            cell = cells[(split, min(acc, cap + 1))]  # past twice the registers: one row
            cell["speeds"].append(fastest / r["latency_s"])
            cell["best_of"] += r["latency_s"] == fastest
            seen.append((shape.shared_tile, fastest / r["latency_s"], r["latency_s"] == fastest))
        if any(t > 1 for t, _, _ in seen):  # a workload with iterators every input reads
            for t, speed, best in seen:
                cell = shared[min(t, SHARED_CAP)]
                cell["speeds"].append(speed)
                cell["best_of"] += best
                cell["workloads"].add(key)
    table = []
    for (split, acc), cell in sorted(cells.items()):
        s = cell["speeds"]
        table.append({"split": split, "accumulators": acc, "or_more": acc > cap, "records": len(s),
                      "geomean_speed": _geomean(s),
                      "within_0_8": sum(v >= 0.8 for v in s) / len(s), "workloads_best": cell["best_of"]})
    shared_table = [{"shared_tile": t, "or_more": t == SHARED_CAP, "records": len(c["speeds"]),
                     "workloads": len(c["workloads"]), "geomean_speed": _geomean(c["speeds"]),
                     "within_0_8": sum(v >= 0.8 for v in c["speeds"]) / len(c["speeds"]),
                     "workloads_best": c["best_of"]}
                    for t, c in sorted(shared.items())]
    return {"hardware_key": hardware_key, "corpus": corpus_dir, "kinds": list(KINDS), "min_records": min_records,
            "registers": _registers(hw), "table": table, "shared": shared_table, "machine": machine(hw)}


#: shared tiles from this extent up form one row
SHARED_CAP = 16


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


def _registers(hw) -> dict:
    from collectors.hardware import accumulator_registers, vector_registers

    return {"vector": vector_registers(hw), "accumulators": accumulator_registers(hw)}


def main() -> None:
    from collectors.hardware import detect_hardware

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="data/corpus")
    ap.add_argument("--hardware", default=None, help="the key (default: this machine's)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    t0 = time.time()
    res = register_tiles(args.corpus, args.hardware or detect_hardware("cpu").key)
    res["wall_s"] = round(time.time() - t0)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"{res['hardware_key']}: {res['registers']['vector']} vector registers, accumulators allowed "
          f"{res['registers']['accumulators']}")
    print(f"{'split':8s} {'acc':>4s} {'records':>8s} {'speed':>6s} {'>=0.8':>6s} {'best of':>8s}")
    for r in res["table"]:
        acc = f"{r['accumulators']}+" if r["or_more"] else str(r["accumulators"])
        print(f"{r['split']:8s} {acc:>4s} {r['records']:8d} {r['geomean_speed']:6.2f} "
              f"{r['within_0_8']:6.0%} {r['workloads_best']:8d}")
    print(f"\nregister tile over iterators every input reads (workloads that have them)\n"
          f"{'shared':>6s} {'records':>8s} {'workloads':>9s} {'speed':>6s} {'>=0.8':>6s} {'best of':>8s}")
    for r in res["shared"]:
        t = f"{r['shared_tile']}+" if r["or_more"] else str(r["shared_tile"])
        print(f"{t:>6s} {r['records']:8d} {r['workloads']:9d} {r['geomean_speed']:6.2f} "
              f"{r['within_0_8']:6.0%} {r['workloads_best']:8d}")


if __name__ == "__main__":
    main()
