"""How a ``tlm compile`` reads on a terminal: a progress bar over the tasks while it schedules,
then the report: the builds side by side (latency, the ratio to the TLM build, compile time),
the check against PyTorch, where each schedule came from, what was shipped instead and why, and
where it ran. The report is printed by the process that asked for the compile, which is not the
one that compiled when a cluster node did (``tlm compile --address``, cluster/node_job.py)."""
from __future__ import annotations

from typing import Any


class TaskProgress:
    """A rich progress bar over tasks (context manager giving the per-task callback)."""

    def __init__(self, console: Any, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("scheduling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), console=console, transient=False)
        self.total = total

    def __enter__(self) -> Any:
        self.progress.start()
        task = self.progress.add_task("", total=self.total)

        def advance(ts: Any) -> None:
            self.progress.update(task, advance=1, description=ts.task.task_name)

        return advance

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()


def print_report(report: dict, *, stream: Any) -> None:
    """``report`` (``compile_with_tlm``'s) as a table and a few lines on ``stream``."""
    from rich.console import Console
    from rich.table import Table

    lat, times = report["latency"], report["compile_time"]
    table = Table(title=f"{report['model']} on {report['hardware']} ({report['model_id']}, top-{report['top_k']})")
    for col in ("build", "latency ms", "vs TLM", "compile s"):
        table.add_column(col, justify="right" if col != "build" else "left")
    # (label, latency key, compile s); a figure in latency_at_least is a lower bound (its run was
    # stopped once far slower than the TLM build's)
    rows = [("TLM schedules", "tlm_s", times["generate_s"] + times["measure_s"] + times["build_s"]),
            ("TVM untuned", "untuned_s", times["untuned_build_s"]),
            ("PyTorch eager", "torch_eager_s", 0.0)]
    if "unmeasured_s" in lat:  # a budget changed schedules: the two builds, whichever ships
        kept = report["budget_built"]
        rows.append(("TLM, before the budget" if kept else "TLM, the budget's schedules",
                     "unmeasured_s" if kept else "budget_s", times["build_s"]))
    if "torch_compile_s" in lat:
        rows.append(("torch.compile", "torch_compile_s", times["torch_compile_s"]))
    if "corpus_best_s" in lat:
        rows.append((f"corpus best ({times['corpus_best_tasks']} tasks)", "corpus_best_s", times["corpus_best_build_s"]))
    for label, key, c in rows:
        at = "> " if key in report.get("latency_at_least", ()) else ""
        table.add_row(label, f"{at}{lat[key] * 1e3:.3f}", f"{at}{lat[key] / lat['tlm_s']:.2f}x", f"{c:.1f}")
    Console(file=stream).print(table)
    print(f"output vs PyTorch: max abs err {report['max_abs_err']:.2e} ({'ok' if report['correct'] else 'MISMATCH'}); "
          f"{report['scheduled']}/{report['tasks']} tasks scheduled ({report['from_corpus']} from the corpus's "
          f"measured records, the rest by the TLM); compile time: extract "
          f"{times['extract_s']:.1f} s, generate {times['generate_s']:.1f} s, measure {times['measure_s']:.1f} s, "
          f"build {times['build_s']:.1f} s", file=stream)
    for d in report["default_lowering"]:
        print(f"  default lowering: {d['task']}: {d['why']}", file=stream)
    if report.get("budget_why"):
        print(f"built: {report['budget_why']}", file=stream)
    if report["shipped"] != "tlm":
        print(f"shipped: {report['shipped_why']}", file=stream)
    if report.get("node"):
        print(f"compiled on {report['node']['host']} (Ray node {report['node']['node_id'][:12]}), through its "
              "collection actor", file=stream)
    if report.get("out"):
        print(f"wrote {report['out']} ({'served schedules' if report['shipped'] == 'tlm' else 'the untuned build'}); "
              f"run it with TVM_NUM_THREADS={report['cores']}, the cores it was timed on (collectors.threads)",
              file=stream)
