"""Write the model card (README.md) of a trained model directory from what the directory holds.

    .venv/bin/python scripts/model_card.py models/<id> [--command "..."]

Every figure on the card is read from the directory's ``tlm_model.json`` (the configuration the
model was built from, its training configuration, and the metrics of its last evaluation), so
the card cannot drift from the model it describes.
"""
from __future__ import annotations

import argparse
import json
import os


def card(path: str, command: str, quality: str | None = None) -> str:
    from tlm.model.network import read_model_info

    info = read_model_info(path)
    held_out = ", ".join(info.get("held_out_models") or []) or "none recorded"
    m, mc, tc = info.get("final_metrics", {}), info["model_config"], info.get("train", {})
    name = os.path.basename(os.path.normpath(path))
    size = os.path.getsize(os.path.join(path, "model.safetensors"))
    lines = [
        f"# {name}", "",
        f"A tensor language model (`transformers.GPT2LMHeadModel`, preset `{mc['preset']}`: {mc['n_layer']} layers, "
        f"{mc['n_head']} heads, width {mc['n_embd']}, {mc['n_positions']} positions, vocabulary {mc['vocab_size']}) "
        f"that writes MetaSchedule decisions for a task's sketch. Weights: `model.safetensors` ({size / 2**20:.1f} MiB); "
        "load with `GPT2LMHeadModel.from_pretrained(dir, use_safetensors=True)` or `tlm.model.network.load_model(dir)`.", "",
        "| | |", "|---|---|",
        f"| stage | {info.get('stage')} |",
        f"| hardware key | {info.get('hardware_key') or 'every hardware of the corpus'} |",
        f"| base model | {info.get('base_model_id') or '-'} |",
        f"| data | `{info.get('data_file', '?')}` (rows: {m.get('rows')}"
        + (f", sha256 {info['data_sha256'][:16]}" if info.get("data_sha256") else "")
        + "), built from `data/corpus` by the command below |",
        f"| held-out models (test split) | {held_out} |",
        f"| steps | {m.get('step')} of {m.get('total_steps')} ({m.get('epoch', 0):.2f} epochs), {m.get('workers')} DDP workers |",
        f"| loss weighting | {tc.get('loss_weighting')} |",
        f"| held-out decision-token loss | {m.get('eval_loss', float('nan')):.4f} |",
        f"| held-out decision-token accuracy | {m.get('eval_accuracy', float('nan')):.4f} |",
        f"| last training loss | {m.get('train_loss', float('nan')):.4f} |",
        f"| training throughput | {m.get('tokens_per_s_per_worker', 0):.0f} tokens/s per worker |",
        f"| wall time of the run | {m['wall_s']:.0f} s |" if m.get("wall_s") else "| wall time of the run | not recorded |",
        "", "Loss and accuracy count decision tokens only (the prompt is given; padding is nothing), on the",
        "sentences of tasks that occur in the held-out models, which were never trained on.", "",
        *_greedy(m),
        *_cost_model(path),
        *_quality(quality, name),
        "## Reproduce", "", "```sh", command, "```", "",
        "Training configuration (from `tlm_model.json`):", "", "```json", json.dumps(tc, indent=2, sort_keys=True), "```",
    ]
    return "\n".join(lines) + "\n"


def _greedy(m: dict) -> list[str]:
    """The schedule-quality section: measured greedy schedules of held-out tasks vs the corpus's best."""
    rows = m.get("greedy_per_task")
    if not rows:
        return []
    out = ["## Greedy schedules of held-out tasks, measured", "",
           f"After training, the greedy schedule of the {len(rows)} heaviest held-out tasks was generated "
           "(constrained decoding: valid as written), built, run and checked on this machine with the "
           "corpus's evaluator settings. Geometric mean of its latency over the corpus's best for the task "
           f"(192 measured candidates of MetaSchedule: 64 evolutionary + 128 random): "
           f"**{m['greedy_vs_corpus_best_geomean']:.2f}x** (1.0 = as fast as the best the search found); "
           f"{m.get('greedy_errors', 0)} errors.", "",
           "| task | greedy (us) | corpus best (us) | ratio | generation (ms) |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        g = f"{r['greedy_s'] * 1e6:.1f}" if r.get("greedy_s") else r.get("error", "-")
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "-"
        out.append(f"| {r['task']} | {g} | {r['corpus_best_s'] * 1e6:.1f} | {ratio} | {r['generate_s'] * 1e3:.0f} |")
    return out + [""]


def _cost_model(path: str) -> list[str]:
    """The cost-model section, from ``cost_model.json`` when the directory ships one."""
    meta_path = os.path.join(path, "cost_model.json")
    if not os.path.exists(meta_path):
        return []
    with open(meta_path) as f:
        meta = json.load(f)
    s, held = meta["summary"], meta.get("held_out") or {}
    r = held.get("ranking") or {}
    out = ["## Its cost model (`cost_model.tar`)", "",
           f"MetaSchedule's XGBoost cost model (per-store features) trained on {s['records']} measured records of "
           f"{s['workloads']} workloads of `{meta['config']['hardware_key']}` ({s['errors']} failures as examples of "
           f"cost ~0), the workloads of {', '.join(held.get('models') or []) or 'no model'} left out. The generator "
           "ranks a sampled pool of this model's programs with it (served top-1 and best-of-k), and "
           "`tlm collect --strategy tlm-seeded` searches with it."]
    if r.get("workloads"):
        out += ["", f"On the held-out workloads' measured records ({r['workloads']} workloads, {r['records']} records): "
                f"Spearman {r['spearman_mean']:.2f}; its top-1 reaches {r['top1_geomean']:.2f} and its best of "
                f"top-5 {r['top5_geomean']:.2f} of the best record's speed (a random pick: {r['random_geomean']:.2f}; "
                "geometric means over the workloads)."]
    return out + ["", "Made by `tlm cost-model fit --corpus data/corpus --hardware "
                  f"{meta['config']['hardware_key']} --out <this directory>` (the last step of the command below).", ""]


def _quality(path: str | None, name: str) -> list[str]:
    """The side-by-side section from ``bench/results/quality.json``, when it measured this model."""
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        q = json.load(f)
    if q.get("model_id") != name:
        return []
    agg = q["aggregate"]
    out = [f"## Against MetaSchedule, the rule baseline and PyTorch (`{os.path.relpath(path)}`)", "",
           f"{len(q['tasks'])} tasks of models it never saw ({', '.join(q['held_out_models'])}; {q['outside_zoo']}), "
           f"every schedule re-measured in one process with one evaluator setting and checked. Speed is "
           f"`{agg['reference']}`'s latency over the method's (above 1: faster than MetaSchedule after "
           f"{agg['reference'].removeprefix('ms_')} trials); time is what getting the schedule took (generation, search, measurement). "
           f"Greedy generation deterministic: {agg['deterministic_greedy']}.", "",
           "| method | speed vs reference (geomean) | time per task (geomean s) | % of peak (matmul, conv2d) |",
           "|---|---:|---:|---:|"]
    for n, v in agg["methods"].items():
        pk = agg["pct_of_peak"].get(n)
        out.append(f"| {n} | {v['geomean_speed_vs_ref']:.2f} | {v['geomean_time_s']:.2f} | "
                   f"{'-' if pk is None else f'{pk:.1f}'} |")
    targets = list(agg.get("targets", [])) + ([q["outside_zoo_set"]["target"]] if "outside_zoo_set" in q else [])
    if targets:
        out += ["", "The targets of the schedule-quality work, from the same run:", "",
                "| figure | method | value | target | met |", "|---|---|---:|---:|---|"]
        out += [f"| {t['figure']} | {t['method']} | {_number(t['value'])} | {t['target']} | {'yes' if t['met'] else 'no'} |"
                for t in targets]
    return out + ["", "Per task, in `bench/results/quality.md`.", ""]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--command", default="bash scripts/setup.sh && scripts/train_seed.sh")
    ap.add_argument("--quality", default=os.path.join(os.path.dirname(__file__), "..", "bench", "results", "quality.json"),
                    help="bench/quality.py's results (quoted when they measured this model)")
    args = ap.parse_args()
    with open(os.path.join(args.path, "README.md"), "w") as f:
        f.write(card(args.path, args.command, args.quality))


if __name__ == "__main__":
    main()
