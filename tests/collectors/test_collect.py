"""The local collection loop: records stream into the corpus; interrupting and re-running resumes."""
from __future__ import annotations

import pytest

from collectors.collect import collect
from collectors.progress import summary_table
from collectors.tasks import Task
from collectors.tuner import TuneConfig, tune_task


def _tasks():
    from collectors.tir import workload_key

    from tests.helpers.workloads import matmul

    mods = {"mm32": matmul(32, 32, 32), "mm48": matmul(48, 32, 16)}
    return [Task(workload_key(m), name, m, model="toy") for name, m in mods.items()]


@pytest.mark.slow
def test_interrupt_then_resume_does_not_remeasure_finished_tasks(cpu_hw, tmp_path):
    from storage import Corpus

    corpus = Corpus.open(tmp_path / "corpus")
    tasks = _tasks()
    config = TuneConfig(trials=2, strategy="replay-trace", seed=0)
    calls: list[str] = []

    def counting_tune(task, *a, **kw):
        calls.append(task.task_name)
        return tune_task(task, *a, **kw)

    def stop_after_first(outcome):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        collect(corpus, cpu_hw, config, tasks=tasks, show_progress=False, tune=counting_tune,
                on_task_done=stop_after_first)
    assert calls == ["mm32"]
    first_rows = corpus.scan().num_rows
    assert first_rows == 2  # kept after the interrupt
    assert corpus.task_status(tasks[0].workload_key, cpu_hw.key, "replay-trace", 2) == "done"
    assert corpus.task_status(tasks[1].workload_key, cpu_hw.key, "replay-trace", 2) is None
    assert corpus.runs()[-1]["status"] == "interrupted"

    result = collect(corpus, cpu_hw, config, tasks=tasks, show_progress=False, tune=counting_tune)
    assert calls == ["mm32", "mm48"]  # the finished task was not tuned again
    assert [o.status for o in result.outcomes] == ["skipped", "done"]
    table = corpus.scan()
    assert table.num_rows == 4
    assert set(table["workload_key"].to_pylist()) == {t.workload_key for t in tasks}
    assert corpus.runs()[-1]["status"] == "done"
    assert summary_table(result).row_count == 2

    again = collect(corpus, cpu_hw, config, tasks=tasks, show_progress=False, tune=counting_tune)
    assert again.count("done") == 0 and again.count("skipped") == 2 and len(calls) == 2
    # A different budget is a different unit of work.
    assert corpus.task_status(tasks[0].workload_key, cpu_hw.key, "replay-trace", 4) is None


@pytest.mark.slow
def test_interrupt_inside_tuning_keeps_streamed_records(cpu_hw, tmp_path):
    """Ctrl-C while a task is being tuned: batches already appended stay; the unit is not done."""
    from storage import Corpus

    corpus = Corpus.open(tmp_path / "corpus")
    task = _tasks()[0]
    config = TuneConfig(trials=4, trials_per_iter=2, strategy="replay-trace", seed=1)

    def tune_then_interrupt(task, hardware, cfg, *, on_records, **kw):
        def flush_then_stop(records):
            on_records(records)
            raise KeyboardInterrupt

        return tune_task(task, hardware, cfg, on_records=flush_then_stop, **kw)

    with pytest.raises(KeyboardInterrupt):
        collect(corpus, cpu_hw, config, tasks=[task], show_progress=False, tune=tune_then_interrupt)
    assert corpus.scan().num_rows == 2  # the first batch of 2
    assert corpus.task_status(task.workload_key, cpu_hw.key, "replay-trace", 4) == "interrupted"


def test_a_collector_failing_after_its_job_was_interrupted_leaves_the_unit_interrupted(cpu_hw, tmp_path):
    """The race behind a flaky SIGTERM test: the driver records an interrupted job's running unit
    "interrupted", then its collector, being killed (its build and run workers gone), raises and
    wrote "failed" over it. A unit the driver has ended keeps the driver's word."""
    from collectors.collect import collect_unit
    from storage import Corpus

    corpus = Corpus.open(tmp_path / "corpus")
    task = _tasks()[0]
    config = TuneConfig(trials=4, trials_per_iter=2, strategy="replay-trace", seed=1)
    unit = (task.workload_key, cpu_hw.key, "replay-trace", 4)

    def driver_stops_then_collector_dies(task, hardware, cfg, **kw):
        corpus.set_task_status(*unit, "interrupted", run_id="r1")  # the driver's _record_end
        raise RuntimeError("popen worker exited")  # what the dying collector then sees

    out = collect_unit(corpus, task, cpu_hw, config, run_id="r1", tune=driver_stops_then_collector_dies)
    assert out.status == "failed"  # what the collector saw, returned to nobody
    assert corpus.task_status(*unit) == "interrupted"

    # A unit still running when its tuning fails is "failed", as before.
    def fails(task, hardware, cfg, **kw):
        raise RuntimeError("broken")

    assert collect_unit(corpus, task, cpu_hw, config, run_id="r2", tune=fails).status == "failed"
    assert corpus.task_status(*unit) == "failed"


def test_collect_rejects_bad_arguments(cpu_hw, tmp_path):
    from storage import Corpus

    corpus = Corpus.open(tmp_path / "c")
    with pytest.raises(ValueError, match="exactly one"):
        collect(corpus, cpu_hw, TuneConfig(trials=1), show_progress=False)
    with pytest.raises(ValueError, match="0"):
        collect(corpus, cpu_hw, TuneConfig(trials=1), tasks=_tasks(), max_tasks=0, show_progress=False)


@pytest.mark.slow
def test_cli_collect_small_model_then_resume(tmp_path, capsys):
    from cluster.cli import main
    from storage import Corpus

    argv = ["collect", "--model", "bert_base", "--small", "--trials", "2", "--tasks", "1",
            "--strategy", "replay-trace", "--corpus", str(tmp_path / "corpus"), "--no-ray"]
    assert main(argv) == 0
    rows = Corpus.open(tmp_path / "corpus").scan().num_rows
    assert rows == 2
    assert main(argv) == 0  # resumes: nothing left to do
    assert Corpus.open(tmp_path / "corpus").scan().num_rows == 2
    assert "skipped" in capsys.readouterr().out


@pytest.mark.slow
def test_cli_collect_only_the_workloads_asked_for(tmp_path, capsys):
    from cluster.cli import main
    from collectors.hardware import detect_hardware
    from collectors.tasks import extract_tasks
    from storage import Corpus

    tasks = extract_tasks("bert_base", detect_hardware("cpu"), small=True)
    wanted = tasks[-1].workload_key  # the lightest: not what --tasks 1 would pick
    argv = ["collect", "--model", "bert_base", "--small", "--trials", "2", "--strategy", "replay-trace",
            "--corpus", str(tmp_path / "corpus"), "--no-ray"]
    assert main([*argv, "--workloads", f"{wanted},0123456789abcdef"]) == 0  # another model's key: passed over
    assert set(Corpus.open(tmp_path / "corpus").scan(columns=["workload_key"]).column(0).to_pylist()) == {wanted}
    capsys.readouterr()
    assert main([*argv, "--workloads", "0123456789abcdef"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines()[-1] == "error: none of the workloads 0123456789abcdef is a task of bert_base"
    argv.remove("--no-ray")  # on Ray: refused the same way, before Ray is started
    assert main([*argv, "--workloads", "0123456789abcdef"]) == 2
    assert capsys.readouterr().err.strip() == "error: none of the workloads 0123456789abcdef is a task of bert_base"


def test_select_tasks_caps_flops_then_keeps_the_heaviest():
    from collectors.tasks import select_tasks

    tasks = [Task(f"{i:016x}", f"t{i}", None, flops=f) for i, f in enumerate((9e9, 5e8, 2e8, 1e6))]
    assert [t.task_name for t in select_tasks(tasks, max_mflop=600)] == ["t1", "t2", "t3"]
    assert [t.task_name for t in select_tasks(tasks, max_mflop=600, max_tasks=2)] == ["t1", "t2"]
    assert select_tasks(tasks) == tasks
    keys = {tasks[0].workload_key, tasks[3].workload_key, "ffffffffffffffff"}
    assert [t.task_name for t in select_tasks(tasks, workloads=keys)] == ["t0", "t3"]
    assert [t.task_name for t in select_tasks(tasks, workloads=keys, max_mflop=600)] == ["t3"]
    with pytest.raises(ValueError, match="max_mflop"):
        select_tasks(tasks, max_mflop=0)


@pytest.mark.parametrize("bad, named", [
    (["--model", "resnet5"], "unknown model 'resnet5'"),
    (["--model", "gpt2", "--tasks", "0"], "--tasks must be a whole number >= 1, got 0"),
    (["--model", "gpt2", "--trials", "-3"], "--trials must be a whole number >= 1, got -3"),
    (["--model", "gpt2", "--max-mflop", "0"], "--max-mflop must be > 0, got 0.0"),
    (["--model", "nothere.onnx"], "no such ONNX file"),
    (["--model", "gpt2", "--workloads", "0412f79e287d1277,conv2d5"], "--workloads 'conv2d5': a workload key is 16 hex"),
])
def test_cli_collect_bad_values_are_one_line_and_exit_2(bad, named, tmp_path, capsys):
    from cluster.cli import main

    assert main(["collect", *bad, "--corpus", str(tmp_path / "c"), "--no-ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {err[7:]}" and named in err and "\n" not in err
    assert not (tmp_path / "c").exists()  # refused before anything was made
