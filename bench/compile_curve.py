"""The curve a deployer reads (issue 33, item 7): a whole model's latency against its total
compile time, every way of building it side by side, one run per model on this machine.

    .venv/bin/python -m bench.compile_curve --model mobilenetv2 [--model bert_base]
        [--budgets 0,64,256,1024] [--methods served,metaschedule,untuned,...] [--small]
        [--tlm-model ID|DIR] [--fresh] [--out bench/results/compile_curve.json]

The methods (each point in a process of its own, so a crash or a leak of one cannot touch
another's figure; every binary checked against PyTorch eager, rtol 1e-3 / atol 1e-4 -- a wrong
or failed build is a point with ``correct: false`` or an ``error``, never a latency):

- ``served``: ``tlm compile`` as a deployer runs it (ranked; a fresh, empty corpus per point),
  at every budget: 0 = the model's schedules, unmeasured; N = ``--budget N``, measured where the
  whole model gains most. ``compile_s``: extraction + generation + measurement + build. After a
  budget, a second compile at budget 0 on the corpus it filled (``again``: what the next compile
  of the model gets, its tasks answered from the corpus), and the two compiles' libraries timed
  in turn in one process (``again_over_first_same_call``: the host's speed between calls is out).
- ``metaschedule``: the plain library path -- ``ms.relax_integration.tune_relax`` (per-task
  evolutionary search, the gradient task scheduler, MetaSchedule's own builder and runner) with
  ``max_trials_global`` = the budget, then ``compile_relax`` with its database. Batches of
  ``MS_TRIALS_PER_ITER`` (not MetaSchedule's 64, with which a budget of 64 tunes one task).
  ``compile_s``: import + tuning + build.
- ``untuned``: TVM's default lowering (``compile_s``: import + build); ``torch_eager``;
  ``torch_compile`` (inductor; the first call's time); ``onnxruntime`` where it is installed
  (``pip install onnxruntime onnx onnxscript``; ``compile_s``: export + session).

Resumable: each point lands in the JSON when it ends; run again on the same hardware key, done
points are kept (``--fresh`` redoes them); on another key a model's run starts over. The PNG
(``compile_curve.png``) and Markdown are written beside the JSON.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench._common import REPO, RESULTS, machine

METHODS = ("served", "metaschedule", "untuned", "torch_eager", "torch_compile", "onnxruntime")
BUDGETED = ("served", "metaschedule")
MS_TRIALS_PER_ITER = 16


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=None, help="zoo model (repeat; default mobilenetv2 and bert_base)")
    ap.add_argument("--budgets", default="0,64,256,1024", help="measurements of the budgeted methods (comma separated)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma separated, of {', '.join(METHODS)}")
    ap.add_argument("--small", action="store_true", help="the zoo's tiny variants (a smoke run, not the figure)")
    ap.add_argument("--tlm-model", default=None, help="the model serving (default: tlm compile's choice)")
    ap.add_argument("--fresh", action="store_true", help="redo the points already in --out")
    ap.add_argument("--point-timeout", type=float, default=5400.0, help="seconds one point may take")
    ap.add_argument("--out", default=os.path.join(RESULTS, "compile_curve.json"))
    ap.add_argument("--point", default=None, help=argparse.SUPPRESS)  # one point, in the child process
    ap.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--libraries", default=None, help=argparse.SUPPRESS)  # FIRST.so,AGAIN.so, in the child
    args = ap.parse_args(argv)
    if args.libraries:
        print(json.dumps(_same_call(args.libraries.split(","), args.model[0], args.small)))
        return
    if args.point:
        print(json.dumps(_one_point(args.point, args.model[0], args.budget, args.small)))
        return
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    try:
        budgets = sorted({int(b) for b in args.budgets.split(",") if b})
    except ValueError:
        budgets = [-1]
    if bad or any(b < 0 for b in budgets):
        print(f"error: unknown methods {bad} (known: {', '.join(METHODS)})" if bad
              else f"error: --budgets must be counts >= 0, got {args.budgets!r}", file=sys.stderr)
        raise SystemExit(2)
    run(args.model or ["mobilenetv2", "bert_base"], methods, budgets, small=args.small, out=args.out,
        fresh=args.fresh, tlm_model=args.tlm_model, timeout=args.point_timeout)


def run(models: list[str], methods: list[str], budgets: list[int], *, small: bool, out: str, fresh: bool,
        tlm_model: str | None, timeout: float) -> dict:
    """Every (model, method, budget) point not yet in ``out`` (all of them with ``fresh``), each
    measured in a child process and written to ``out`` as it ends; then the PNG and Markdown."""
    from bench._common import refuse_beside_measuring
    from collectors.hardware import detect_hardware

    refuse_beside_measuring("the compile curve")
    hw = detect_hardware("cpu")
    res = _load(out)
    res["machine"] = machine(hw)
    for model in models:
        entry = res["models"].get(model)
        if entry is None or entry.get("hardware_key") != hw.key or entry.get("small") != small:
            entry = res["models"][model] = {"hardware_key": hw.key, "small": small, "points": []}
        for method in methods:
            for budget in (budgets if method in BUDGETED else [0]):
                if method == "metaschedule" and budget == 0:
                    continue  # MetaSchedule with no measurement is the untuned build
                done = [p for p in entry["points"] if (p["method"], p["measurements"]) == (method, budget)]
                if done and not fresh:
                    print(f"{model}: {method} at {budget} measurements already in {out}: {_line(done[-1])} "
                          "(--fresh measures it again)", flush=True)
                    continue
                print(f"{model}: {method} at {budget} measurements ...", flush=True)
                point = _child(method, model, budget, small, tlm_model, timeout)
                entry["points"] = [p for p in entry["points"] if p not in done] + [point]
                entry["targets"] = targets(entry["points"])
                _write(res, out)
                print(f"  {_line(point)}", flush=True)
    _write(res, out)
    plot(res, os.path.splitext(out)[0] + ".png")
    return res


def _child(method: str, model: str, budget: int, small: bool, tlm_model: str | None, timeout: float) -> dict:
    """One point, measured in a process of its own; a crash or a timeout is the point's error."""
    point = {"method": method, "measurements": budget}
    if method != "served":
        cmd = [sys.executable, "-m", "bench.compile_curve", "--point", method, "--model", model, "--budget", str(budget)]
        out, error = _run(cmd + (["--small"] if small else []), timeout)
        return point | ({"error": error, "correct": False} if error else json.loads(out.strip().splitlines()[-1]))
    # run where there is no ./corpus, so budget 0 is the model alone; a budget measures into a fresh one,
    # then a second compile at budget 0 reads that corpus (what the next compile of the model gets)
    with tempfile.TemporaryDirectory(prefix="tlm-curve-") as d:
        cmd = [sys.executable, "-m", "cluster.cli", "compile", "--model", model, "--json", "--no-torch-compile"] \
            + (["--corpus", os.path.join(d, "corpus")] if budget else []) \
            + (["--small"] if small else []) + (["--tlm-model", os.path.abspath(tlm_model)
                                                 if os.path.isdir(tlm_model) else tlm_model] if tlm_model else [])
        libs = [os.path.join(d, "first.so"), os.path.join(d, "again.so")]
        out, error = _run(cmd + (["--budget", str(budget), "--out", libs[0]] if budget else []), timeout, cwd=d)
        again, again_error = _run(cmd + ["--out", libs[1]], timeout, cwd=d) if budget and not error else ("", None)
        if budget and not error:
            point["again"] = {"error": again_error, "correct": False} if again_error else _again(again)
            if not again_error:  # the two binaries timed in one call: the host's noise between calls is out
                same, same_error = _run([sys.executable, "-m", "bench.compile_curve", "--model", model,
                                         "--libraries", ",".join(libs)] + (["--small"] if small else []), timeout)
                point["again"] |= {"same_call_error": same_error} if same_error else \
                    json.loads(same.strip().splitlines()[-1])
    if error:
        return point | {"error": error, "correct": False}
    report = json.loads(out[out.index("{"):])
    times = report["compile_time"]
    return point | {
        "measured": report["measurements"], "compile_s": times["total_s"],
        "latency_ms": report["latency"]["tlm_s"] * 1e3, "correct": report["correct"],
        "max_abs_err": report["max_abs_err"], "model_id": report["model_id"],
        "model_fallback": report.get("model_fallback"), "from_corpus": report["from_corpus"],
        "untuned_ms_same_run": report["latency"]["untuned_s"] * 1e3, "shipped": report["shipped"],
        # a budget's build timed beside the schedules it replaced; the faster is built (budget_built)
        "unmeasured_ms_same_run": (report["latency"].get("unmeasured_s") or 0) * 1e3 or None,
        "budget_built": report.get("budget_built"),
        "budget_ms_same_run": (report["latency"].get("budget_s") or 0) * 1e3 or None,
        "split_s": {k: times[k] for k in ("extract_s", "generate_s", "measure_s", "build_s")},
        # what the budget bought, task by task: the measured ones and those that kept TVM's default lowering
        "tasks_measured": [{"task": t["task"], "weight": t["weight"], "source": t["source"],
                            "latency_us": t["latency_s"] * 1e6, "default_us": (t.get("default_s") or 0) * 1e6 or None}
                           for t in report["per_task"] if t["latency_s"] and t["source"] != "corpus"],
    }


def _again(out: str) -> dict:
    """The second compile at budget 0 after a budget's: its latency, time and corpus answers."""
    report = json.loads(out[out.index("{"):])
    return {"latency_ms": report["latency"]["tlm_s"] * 1e3, "compile_s": report["compile_time"]["total_s"],
            "from_corpus": report["from_corpus"], "correct": report["correct"]}


def _same_call(libraries: list[str], model: str, small: bool) -> dict:
    """The first compile's library and the second's (at budget 0, from the corpus the first
    filled) timed in turn in this one process (``time_side_by_side``): between two calls this
    host's speed moved 11% (the untuned build 168 against 186 ms), which a ratio of two calls
    reads as the second compile's loss. Also whether the two files are the same bytes."""
    import tvm

    from collectors.compile import time_side_by_side
    from collectors.hardware import detect_hardware
    from collectors.zoo import build_model

    _, example = build_model(model, small=small, seq_len=None if small else 128)
    first, again = (tvm.runtime.load_module(p) for p in libraries)
    lat = time_side_by_side({"first": first, "again": again}, example, detect_hardware("cpu"))[0]
    same = filecmp.cmp(libraries[0], libraries[1], shallow=False)
    return {"first_ms_same_call": lat["first"] * 1e3, "again_ms_same_call": lat["again"] * 1e3,
            "again_over_first_same_call": lat["again"] / lat["first"], "same_bytes": same}


def _run(cmd: list[str], timeout: float, cwd: str | None = None) -> tuple[str, str | None]:
    """``(stdout, None)``, or ``("", why)`` when the command gave no report; stderr passes through."""
    env = {k: v for k, v in os.environ.items() if k != "TLM_CORPUS"}
    env["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [env.get("PYTHONPATH")])])
    try:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout, check=False, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return "", f"over {timeout:.0f} s"
    if done.returncode not in (0, 1):  # tlm compile exits 1 on a wrong answer: still a point
        return "", f"exit {done.returncode}"
    if "{" not in done.stdout:
        return "", f"no report (exit {done.returncode})"
    return done.stdout, None


def _one_point(method: str, model: str, budget: int, small: bool) -> dict:
    """The figures of one non-served point, in this (child) process."""
    from collectors.compile import check_against_torch, compile_model, time_model, time_torch, time_torch_compile
    from collectors.ms_database import unwritten_best
    from collectors.hardware import detect_hardware
    from collectors.host_load import measuring_job
    from collectors.tasks import import_relax
    from collectors.zoo import build_model

    hw = detect_hardware("cpu")
    module, example = build_model(model, small=small, seq_len=None if small else 128)
    if method == "torch_eager":
        return {"compile_s": 0.0, "latency_ms": time_torch(module, example, threads=hw.cores) * 1e3, "correct": True}
    if method == "torch_compile":
        lat, compile_s = time_torch_compile(module, example, hw.cores)
        return {"compile_s": compile_s, "latency_ms": lat * 1e3, "correct": True}
    if method == "onnxruntime":
        return _onnxruntime(module, example, hw.cores)
    t0 = time.perf_counter()
    relax_mod = import_relax(module, example, fold_batch_norm=True)  # the graph `tlm compile` builds (served points)
    if method == "untuned":
        built = compile_model(relax_mod, hw)
        extra: dict[str, Any] = {}
    else:
        from tvm.s_tir import meta_schedule as ms

        with tempfile.TemporaryDirectory(prefix="tlm-curve-ms-") as d, \
                measuring_job(f"MetaSchedule on {model} ({budget} trials, the compile curve)"):
            db = ms.relax_integration.tune_relax(
                mod=relax_mod, params={}, target=hw.tvm_target(), work_dir=d, max_trials_global=budget,
                num_trials_per_iter=MS_TRIALS_PER_ITER, seed=0)
            tuned_s = time.perf_counter() - t0
            built = compile_model(relax_mod, hw, db)
            extra = {"measured": len(db.get_all_tuning_records()), "tuning_s": tuned_s}
    compile_s = time.perf_counter() - t0
    if method == "metaschedule":  # which of its best programs leave an output unwritten (a wrong build says why)
        extra["unwritten"] = unwritten_best(db)
    err, correct = check_against_torch(built, module, example, hw)
    return {"compile_s": compile_s, "latency_ms": time_model(built, example, hw) * 1e3, "correct": correct,
            "max_abs_err": err} | extra


def _onnxruntime(module: Any, example: tuple, threads: int) -> dict:
    """ONNX Runtime's CPU session on the exported model (compile_s: export + session), checked."""
    try:
        import onnxruntime as ort
    except ImportError:
        return {"error": "onnxruntime is not installed (pip install onnxruntime onnx onnxscript)", "correct": False}
    import statistics

    import numpy as np
    import torch

    from collectors.compile import TOLERANCE, torch_output

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        t0 = time.perf_counter()
        torch.onnx.export(module, example, path, dynamo=True)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        compile_s = time.perf_counter() - t0
    feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), example)}
    got = sess.run(None, feed)[0]
    want = torch_output(module, example)
    for _ in range(5):
        sess.run(None, feed)
    times = []
    for _ in range(30):
        t = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - t)
    return {"compile_s": compile_s, "latency_ms": statistics.median(times) * 1e3,
            "correct": bool(np.allclose(got, want, **TOLERANCE)),
            "max_abs_err": float(np.max(np.abs(got - want)))}


def targets(points: list[dict]) -> dict:
    """Issue 33's figures read from one model's points (None where a point is missing): the
    served build unmeasured / untuned; served / MetaSchedule at the largest budget both have;
    how much less compile time the served build takes to reach MetaSchedule's latency at its
    largest budget (None when it never does)."""
    ok = {(p["method"], p["measurements"]): p for p in points if p.get("correct") and "latency_ms" in p}
    out: dict[str, Any] = {}
    served0, untuned = ok.get(("served", 0)), ok.get(("untuned", 0))
    out["served_unmeasured_over_untuned"] = served0["latency_ms"] / untuned["latency_ms"] if served0 and untuned else None
    common = sorted({b for (m, b) in ok if m == "served"} & {b for (m, b) in ok if m == "metaschedule"})
    if common:
        b = common[-1]
        out["at_budget"] = b
        out["served_over_metaschedule"] = ok[("served", b)]["latency_ms"] / ok[("metaschedule", b)]["latency_ms"]
    ms_points = sorted((b, p) for (m, b), p in ok.items() if m == "metaschedule")
    if ms_points:
        _, best_ms = ms_points[-1]
        reach = [p for (m, _), p in ok.items() if m == "served" and p["latency_ms"] <= best_ms["latency_ms"]]
        first = min(reach, key=lambda p: p["compile_s"], default=None)
        out["metaschedule_largest_budget"] = best_ms["measurements"]
        out["compile_time_saved_to_reach_it"] = best_ms["compile_s"] / first["compile_s"] if first else None
    # a compile at budget 0 after one at budget N (same corpus) against the first's result: 1.0 is "as fast"
    again = sorted((b, p) for (m, b), p in ok.items() if m == "served" and (p.get("again") or {}).get("correct"))
    if again:
        b, p = again[-1]
        out["again_budget"], out["again_over_first"] = b, p["again"]["latency_ms"] / p["latency_ms"]
        if "again_over_first_same_call" in p["again"]:  # the two binaries timed in one call, where measured
            out["again_over_first"] = p["again"]["again_over_first_same_call"]
            out["again_same_call"] = True
    return out


def _load(out: str) -> dict:
    from collectors.compile import TOLERANCE

    if os.path.exists(out):
        with open(out) as fh:
            res = json.load(fh)
        if "models" in res:
            return res
    return {"methods": {"served": "tlm compile, ranked, --budget N", "metaschedule":
                        f"tune_relax, max_trials_global N, {MS_TRIALS_PER_ITER} a batch, gradient scheduler"},
            "tolerance": TOLERANCE, "models": {}}


def _write(res: dict, out: str) -> None:
    tmp = out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(res, fh, indent=2)
    os.replace(tmp, out)  # a point, once measured, is never lost to a half-written file
    with open(os.path.splitext(out)[0] + ".md", "w") as fh:
        fh.write(markdown(res))


def _line(p: dict) -> str:
    if "latency_ms" not in p:
        return f"{p['method']}@{p['measurements']}: {p.get('error')}"
    return (f"{p['method']}@{p['measurements']}: {p['latency_ms']:.3f} ms after {p['compile_s']:.1f} s"
            f"{'' if p.get('correct') else ' (WRONG OUTPUT)'}")


def markdown(res: dict) -> str:
    lines = ["# The compile curve: whole-model latency against compile time", "",
             f"Machine: {res['machine'].get('cpu')} ({res['machine'].get('hardware_key')}). "
             "Written by `python -m bench.compile_curve`; every binary checked against PyTorch. TVM's builds "
             "(served, untuned, MetaSchedule) fold each batch norm into its convolution, as `tlm compile` does "
             "by default (points measured before 2026-12-05 20:00 UTC did not).", ""]
    for model, entry in res["models"].items():
        lines += [f"## {model}{' (small)' if entry.get('small') else ''}", "",
                  "| method | measurements | compile s | latency ms | correct |", "|---|---:|---:|---:|---|"]
        for p in sorted(entry["points"], key=lambda p: (METHODS.index(p["method"]), p["measurements"])):
            if "latency_ms" in p:
                lines.append(f"| {p['method']} | {p['measurements']} | {p['compile_s']:.1f} | {p['latency_ms']:.3f} "
                             f"| {'yes' if p.get('correct') else 'NO'} |")
            else:
                lines.append(f"| {p['method']} | {p['measurements']} | - | - | {p.get('error')} |")
        ab = [p for p in sorted(entry["points"], key=lambda p: p["measurements"])
              if p["method"] == "served" and p.get("unmeasured_ms_same_run")]
        if ab:  # what each budget bought on the whole model, its build timed beside the one before it
            lines += ["", "| budget | its schedules, ms | before it, ms (same run) | built | a second compile at 0, ms |",
                      "|---:|---:|---:|---|---:|"]
            for p in ab:
                lines.append(f"| {p['measurements']} | {_ms(p.get('budget_ms_same_run'))} | {p['unmeasured_ms_same_run']:.3f} | "
                             f"{'the budget' if p.get('budget_built') else 'before it'} | "
                             f"{_ms((p.get('again') or {}).get('latency_ms'))} |")
        t = entry.get("targets", {})
        lines += ["", "| target | measured | goal |", "|---|---:|---:|",
                  f"| served unmeasured / untuned | {_fmt(t.get('served_unmeasured_over_untuned'))} | <= 1.0x |",
                  f"| served / MetaSchedule at {t.get('at_budget', '-')} measurements | "
                  f"{_fmt(t.get('served_over_metaschedule'))} | <= 1.0x |",
                  f"| compile time saved to reach MetaSchedule@{t.get('metaschedule_largest_budget', '-')} | "
                  f"{_fmt(t.get('compile_time_saved_to_reach_it'))} | >= 10x |",
                  f"| a second compile at budget 0 after one at {t.get('again_budget', '-')} / the first's result"
                  f"{' (the two binaries timed in one call)' if t.get('again_same_call') else ''} | "
                  f"{_fmt(t.get('again_over_first'))} | as fast (1.0x) |", ""]
    if res.get("note"):  # what limits the figures, said by whoever ran them (kept across resumed runs)
        lines += [res["note"], ""]
    return "\n".join(lines) + "\n"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def plot(res: dict, path: str) -> None:
    """One panel per model: latency against compile time (log), the budgeted methods as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(res["models"].items())
    if not models:
        return
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    for ax, (model, entry) in zip(axes[0], models):
        pts = [p for p in entry["points"] if "latency_ms" in p and p.get("correct")]
        for method in METHODS:
            mine = sorted((p for p in pts if p["method"] == method), key=lambda p: p["measurements"])
            if not mine:
                continue
            xs, ys = [max(p["compile_s"], 0.1) for p in mine], [p["latency_ms"] for p in mine]
            ax.plot(xs, ys, "o-" if method in BUDGETED else "s", label=method)
            if method in BUDGETED:
                for p, x, y in zip(mine, xs, ys):
                    ax.annotate(str(p["measurements"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xscale("log")
        ax.set_yscale("log")  # an untuned build is 30-400x the rest
        ax.set_xlabel("compile time, s (log; eager at 0.1)")
        ax.set_ylabel("whole-model latency, ms (log)")
        ax.set_title(f"{model} on {entry['hardware_key']}{' (small)' if entry.get('small') else ''}")
        ax.grid(True, alpha=0.3)
        if pts:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
