"""``tlm compile`` (a whole model with generated schedules, checked against PyTorch) and
``tlm collect --strategy tlm`` (the closed loop), through the CLI, with a tiny random GPT-2."""
from __future__ import annotations

import json

import pytest

from cluster.cli import main

USER_MODEL = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(4, 32),)
'''


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from collectors.hardware import detect_hardware
    from tlm.model.network import build_model, model_config, save_model
    from tlm.model.tokenizer import build_tokenizer

    tok = build_tokenizer()
    cfg = model_config("tiny", tok, 400)
    path = tmp_path_factory.mktemp("m") / "tiny-host"
    save_model(build_model(cfg, seed=0), tok, cfg, str(path),
               info={"stage": "finetune", "hardware_key": detect_hardware("cpu").key})
    return str(path)


def _report(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.slow
def test_compile_a_zoo_model_matches_pytorch(tiny_dir, capsys):
    rc = main(["compile", "--model", "resnet50", "--small", "--tlm-model", tiny_dir, "--no-torch-compile", "--json"])
    report = _report(capsys)
    assert rc == 0 and report["correct"] and report["tasks"] > 5
    # every task is the model's, but for the tiny ones no sketch writes serial: TVM's default (serial) lowering
    assert all(t["source"] == "model" or (t["source"] == "default" and t["error"].startswith("tiny:"))
               for t in report["per_task"])
    assert report["scheduled"] == sum(t["source"] == "model" for t in report["per_task"]) > 5
    assert report["model_id"] == "tiny-host" and report["latency"]["tlm_s"] > 0
    assert set(report["compile_time"]) >= {"extract_s", "generate_s", "measure_s", "build_s"}


@pytest.mark.slow
def test_a_build_that_differs_from_pytorch_is_never_shipped(tiny_dir, tmp_path, monkeypatch, capsys):
    """A served build whose output differs from PyTorch's ships TVM's untuned build instead, and
    says why (it shipped whenever it was faster: four served convolutions of MobileNetV2 with its
    batch norms folded wrote 112 of 113 padded rows, collectors.sketches.unwritten_output)."""
    import collectors.compile as compile_mod

    (tmp_path / "user_net.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(compile_mod, "check_against_torch", lambda *a, **k: (0.25, False))
    rc = main(["compile", "--module", "user_net:make", "--tlm-model", tiny_dir, "--out", str(tmp_path / "net.so"),
               "--no-torch-compile", "--json"])
    report = _report(capsys)
    assert rc == 1 and not report["correct"] and report["shipped"] == "untuned"  # exit status says it
    assert "differs from PyTorch" in report["shipped_why"] and (tmp_path / "net.so").stat().st_size > 0
    assert report["batch_norm_folded"]  # tlm compile's default graph (--keep-batch-norm, --corpus-best: as collected)


@pytest.mark.slow
def test_compile_a_users_module_with_measured_top_k_appends_to_the_corpus(tiny_dir, tmp_path, monkeypatch, capsys):
    from storage import Corpus

    (tmp_path / "user_net.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    rc = main(["compile", "--module", "user_net:make", "--tlm-model", tiny_dir, "--top-k", "2",
               "--corpus", str(tmp_path / "c"), "--out", str(tmp_path / "net.so"), "--no-torch-compile", "--json"])
    report = _report(capsys)
    assert rc == 0 and report["correct"] and (tmp_path / "net.so").stat().st_size > 0
    # never shipped slower than TVM's untuned build (issue 33): which one went out, and why
    lat = report["latency"]
    assert report["shipped"] == ("untuned" if lat["untuned_s"] < lat["tlm_s"] else "tlm")
    assert (report["shipped_why"] is None) == (report["shipped"] == "tlm")
    measured = [t for t in report["per_task"] if t["latency_s"]]
    assert measured and all(t["candidates"] == 2 for t in report["per_task"] if not t["error"])
    with Corpus.open(str(tmp_path / "c")) as corpus:
        tuners = set(corpus.scan().column("tuner").to_pylist())
    assert tuners == {"tlm:tiny-host"}
    # compiled again, without measuring: every task the first compile measured is answered with
    # the corpus's fastest record of it (issue 33: what the cluster measured, served first)
    rc = main(["compile", "--module", "user_net:make", "--tlm-model", tiny_dir, "--corpus", str(tmp_path / "c"),
               "--no-torch-compile", "--json"])
    second = _report(capsys)
    assert rc == 0 and second["correct"] and second["from_corpus"] == len(measured)
    first = {t["task"]: t["latency_s"] for t in measured}
    again = {t["task"]: t for t in second["per_task"]}
    assert all(again[n]["source"] == "corpus" and again[n]["latency_s"] == lat for n, lat in first.items())
    assert all(t["source"] == "model" for n, t in again.items() if n not in first and not t["error"])


@pytest.mark.slow
def test_prepacked_weights_are_the_default_and_records_measured_in_the_models_own_layout_are_named(
        tiny_dir, tmp_path, monkeypatch, capsys):
    """``tlm compile`` reads each weight in the layout its schedule's tiles walk (other workloads
    than the ones ``tlm collect`` measures); a corpus holding the model's tasks only in their own
    layout is said so, and ``--keep-weight-layout`` builds with those records."""
    (tmp_path / "user_net.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    base = ["compile", "--module", "user_net:make", "--tlm-model", tiny_dir, "--corpus", str(tmp_path / "c"),
            "--no-torch-compile", "--json"]
    assert main([*base, "--keep-weight-layout", "--top-k", "2"]) == 0
    kept = _report(capsys)
    measured = {t["task"] for t in kept["per_task"] if t["latency_s"]}
    assert kept["correct"] and not kept["weights_prepacked"] and len(measured) >= 2
    assert main(base) == 0
    out = capsys.readouterr()
    packed = json.loads(out.out[out.out.index("{"):])
    assert packed["correct"] and packed["weights_prepacked"]
    dense = {t["task"] for t in packed["per_task"] if t["task"].startswith("fused_matmul")}
    assert dense and all(t["source"] == "model" for t in packed["per_task"] if t["task"] in dense)
    assert f"{len(dense)} tasks are measured in the corpus with their weights in the model's own layout only" \
        in " ".join(out.err.split())
    assert main([*base, "--keep-weight-layout"]) == 0
    assert _report(capsys)["from_corpus"] == len(measured)


@pytest.mark.slow
def test_an_anytime_budget_measures_where_the_model_gains_most_and_the_next_compile_starts_from_it(
        tiny_dir, tmp_path, monkeypatch, capsys):
    """``--budget 6``: at most 6 measurements in all, a batch at a time, every one stored; the
    heaviest task (its FLOPs x occurrences) is measured first; a compile without a budget then
    answers every measured task from the corpus."""
    from storage import Corpus

    (tmp_path / "user_net.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    base = ["compile", "--module", "user_net:make", "--tlm-model", tiny_dir, "--corpus", str(tmp_path / "c"),
            "--no-torch-compile", "--json"]
    assert main([*base, "--budget", "6"]) == 0
    report = _report(capsys)
    assert report["correct"] and 0 < report["measurements"] <= 6 and report["budget"] == 6
    if report["budget_built"] is not None:  # the budget changed a schedule: timed beside those before it
        lat = report["latency"]
        assert lat["tlm_s"] <= lat["unmeasured_s"] and (report["budget_built"] or lat["budget_s"] > lat["tlm_s"])
    defaults = [t for t in report["per_task"] if t["default_s"] is not None]
    with Corpus.open(str(tmp_path / "c")) as corpus:  # every measurement stored, TVM's default lowering too
        stored = corpus.scan(columns=["tuner"]).column("tuner").to_pylist()
    assert len(stored) == report["measurements"] and stored.count("tvm-default") == len(defaults)
    # never slower than doing nothing, task by task: a measured task keeps TVM's default lowering
    # exactly when no candidate of the model's beat it, and the report says so
    assert defaults, "each measured task's first batch times its default lowering"
    fell_back = {d["task"] for d in report["default_lowering"]}
    for t in defaults:
        assert (t["source"] == "default") == (t["latency_s"] == t["default_s"]) == (t["task"] in fell_back)
    measured = [t for t in report["per_task"] if t["latency_s"]]
    heaviest = max(report["per_task"], key=lambda t: t["weight"] * t["flops"])
    assert heaviest["task"] in {t["task"] for t in measured}
    assert main(base) == 0
    again = _report(capsys)
    assert again["from_corpus"] == len(measured)
    # --time-budget: a batch starts only while time is left, so 10 ms is one batch of the heaviest task
    base[base.index("--corpus") + 1] = str(tmp_path / "c2")
    assert main([*base, "--time-budget", "0.01"]) == 0
    timed = _report(capsys)
    assert timed["correct"] and timed["measurements"] == 4 and timed["time_budget_s"] == 0.01
    assert heaviest["task"] in {t["task"] for t in timed["per_task"] if t["latency_s"]}


def test_a_budget_asking_a_server_goes_on_with_the_search_once_the_servers_candidates_are_measured(
        tiny_dir, tmp_path, monkeypatch, capsys):
    """``--endpoint URL --budget N``: the server's ranked candidates are measured first, then
    the model-seeded search runs here from them (before: with no model loaded, a task whose
    pool was measured was done, and the rest of the budget went unspent). The endpoint is the
    tiny model behind ``endpoint_source``'s interface, answering one candidate a task."""
    import tlm.service.whole_model as whole_model
    from collectors.hardware import detect_hardware
    from storage import Corpus
    from tlm.model.network import load_model

    model, tok, _ = load_model(tiny_dir)
    local = whole_model.local_source(detect_hardware("cpu"), model, tok, "tiny-served")
    asked = []

    def fake_endpoint(url, hardware_key, **kw):
        asked.append(url)
        return lambda task, k: local(task, 1)

    monkeypatch.setattr(whole_model, "endpoint_source", fake_endpoint)
    (tmp_path / "user_net.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "--module", "user_net:make", "--endpoint", "http://127.0.0.1:9", "--corpus",
                 str(tmp_path / "c"), "--no-torch-compile", "--json", "--budget", "12"]) == 0
    report = _report(capsys)
    assert asked == ["http://127.0.0.1:9"] and report["correct"] and report["measurements"] == 12
    with Corpus.open(str(tmp_path / "c")) as corpus:
        tuners = corpus.scan(columns=["tuner"]).column("tuner").to_pylist()
    assert tuners[:2] == ["tvm-default", "tlm:tiny-served"] and "tlm-seeded:tiny-served" in tuners[2:]


@pytest.mark.slow
@pytest.mark.ray
def test_a_compile_on_a_cluster_runs_on_a_node_of_the_key_through_its_collection_actor(tiny_dir, tmp_path):
    """``--address``: the compile runs in a collection actor of the key (not in the driver), the
    user's module reaches the node by value (the actor's process cannot import it), the budget's
    measurements land in the shared corpus as a "compile" run, and ``--out`` is written here."""
    import subprocess
    import sys

    import tvm

    from collectors.hardware import detect_hardware
    from storage import Corpus
    from tests.helpers import subprocess_env

    (tmp_path / "user_net.py").write_text(USER_MODEL)
    key = detect_hardware("cpu").key
    argv = [sys.executable, "-m", "cluster.cli", "compile", "--module", "user_net:make", "--tlm-model", tiny_dir,
            "--address", "local", "--hardware", key, "--corpus", str(tmp_path / "c"), "--budget", "3",
            "--out", str(tmp_path / "net.so"), "--no-torch-compile", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=subprocess_env(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0"))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out[out.index("{\n"):])
    assert report["correct"] and report["hardware"] == key and 0 < report["measurements"] <= 3
    node = report["node"]  # the actor's process, not the driver's
    assert node["hardware_key"] == key and node["pid"] != proc.pid and node["tvm_num_threads"]
    assert "compiling on" in err and "through its collection actor" in err
    with Corpus.open(str(tmp_path / "c")) as corpus:
        stored = corpus.scan(columns=["hardware_key"]).column("hardware_key").to_pylist()
        runs = [r for r in corpus.runs() if r["kind"] == "compile"]
    assert stored == [key] * report["measurements"]
    assert [r["status"] for r in runs] == ["done"]
    assert report["out"] == str(tmp_path / "net.so") and tvm.runtime.load_module(report["out"])


@pytest.mark.slow
def test_compile_on_a_key_without_a_model_of_its_own_uses_the_nearest_and_says_so(tmp_path, monkeypatch, capsys):
    """As the server does (``catalog.serving_model``): a deployer on a CPU no shipped model was
    fine-tuned for gets the nearest model's schedules, and the report says it is a fallback
    (it failed with "no model for hardware" before)."""
    from collectors.hardware import detect_hardware
    from tlm.service.catalog import serving_model

    (tmp_path / "user_net.py").write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)  # no ./corpus: the shipped models only
    monkeypatch.delenv("TLM_CORPUS", raising=False)
    serving = serving_model(detect_hardware("cpu"))
    rc = main(["compile", "--module", "user_net:make", "--no-rank", "--no-torch-compile", "--json"])
    report = _report(capsys)
    assert rc == 0 and report["correct"] and report["model_id"] == serving.entry.model_id
    assert report["model_fallback"] == (serving.why if serving.fallback else None)


def _foreign_key() -> str:
    """A CPU key whose code this host cannot run: an Intel one with AMX on an AMD host, an AMD one
    on an Intel host (on an Emerald Rapids, code for a Sapphire Rapids runs: the nearest model
    wrote it and the compile succeeded)."""
    from collectors.hardware import NotRunnableHere, check_runs_here, hardware_for_key

    for key in ("cpu-sapphirerapids-2c", "cpu-znver4-2c"):
        try:
            check_runs_here(hardware_for_key(key))
        except NotRunnableHere:
            return key
    pytest.skip("this host runs code for every candidate key")


@pytest.mark.parametrize("argv, words", [
    (["compile", "--model", "resnet5"], "unknown model 'resnet5'"),
    (["compile", "--model", "resnet50", "--budget", "-1"], "--budget must be >= 0 measurements, got -1"),
    (["compile", "--model", "resnet50", "--budget", "4", "--top-k", "2"], "--budget or --time-budget and --top-k > 1"),
    (["compile", "--model", "resnet50", "--time-budget", "-5"], "--time-budget must be >= 0 seconds, got -5"),
    (["compile", "--model", "resnet50", "--top-k", "0"], "--top-k must be between 1 and 64"),
    (["compile", "--module", "nomodule"], "is not PKG.MOD:FACTORY"),
    (["compile", "--model", "resnet50", "--small", "--tlm-model", "nope"], "unknown model 'nope'"),
    (["compile", "--model", "resnet50", "--small", "--hardware", "Bad Key"], "hardware key 'Bad Key'"),
    # another CPU, one whose code this host cannot run: refused before anything runs
    (["compile", "--model", "resnet50", "--small", "--hardware", "{foreign}"], "{foreign}"),
])
def test_compile_usage_errors_are_one_line_and_exit_2(argv, words, capsys):
    foreign = _foreign_key()
    argv, words = [a.format(foreign=foreign) for a in argv], words.format(foreign=foreign)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1] and err[-1].startswith("error:")


FFT_MODEL = '''
import torch


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


def make():
    return Spectrum().eval(), (torch.randn(4, 64),)
'''


def test_a_model_with_an_op_tvm_cannot_import_is_one_line_naming_the_op(tmp_path, monkeypatch, capsys):
    """TVM's PyTorch importer has no converter for some ops (an FFT): it asserted, and `tlm compile
    --module` ended in a traceback through TVM's frontend."""
    (tmp_path / "spectrum.py").write_text(FFT_MODEL)
    monkeypatch.chdir(tmp_path)
    assert main(["compile", "--module", "spectrum:make", "--no-torch-compile"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and "_fft_r2c" in err[-1] and "Traceback" not in "".join(err), err[-3:]


CHATTER = """
import sys
from cluster.cli import main
from tests.helpers.corpora import fixed_cpu
from tests.helpers.workloads import make_task, matmul_relu_mod
from tlm.language import build_space

main(sys.argv[1:])  # sets up logging as every command does, then fails fast (no such corpus)
build_space(make_task(matmul_relu_mod(), "fused_matmul_relu", "matmul"), fixed_cpu("rocketlake"))
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_metaschedules_info_chatter_reaches_the_terminal_only_with_verbose(tmp_path, verbose):
    """On a CPU with VNNI, MetaSchedule logs "The workload cannot be tensorized" at INFO for every
    float task whose space it builds: 606 lines drowned the progress bar of `tlm compile --model
    efficientnet_b0` on a Rocket Lake. Every command keeps it quiet; `-v` shows it."""
    import subprocess
    import sys

    from tests.helpers import subprocess_env

    argv = ["-v"] * verbose + ["corpus", "stats", "--corpus", str(tmp_path / "missing")]
    proc = subprocess.run([sys.executable, "-c", CHATTER, *argv], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("cannot be tensorized" in proc.stderr) == verbose, proc.stderr[-2000:]


@pytest.mark.slow
def test_collect_with_the_tlm_strategy_closes_the_loop_and_resumes(tiny_dir, tmp_path, capsys):
    from storage import Corpus

    argv = ["collect", "--strategy", "tlm", "--tlm-model", tiny_dir, "--model", "resnet50", "--small",
            "--tasks", "2", "--trials", "3", "--corpus", str(tmp_path / "c"), "--no-progress"]
    assert main(argv) == 0
    with Corpus.open(str(tmp_path / "c")) as corpus:
        t = corpus.scan()
        assert set(t.column("tuner").to_pylist()) == {"tlm:tiny-host"}
        assert 2 <= t.num_rows <= 6 and len(set(t.column("workload_key").to_pylist())) == 2
        first = t.num_rows
    assert main(argv) == 0, "a second run skips the done units"
    with Corpus.open(str(tmp_path / "c")) as corpus:
        assert corpus.scan().num_rows == first
    assert main([*argv[:-3], "--trials", "65", "--corpus", str(tmp_path / "c")]) == 2


@pytest.mark.slow
def test_a_collection_of_the_compiled_graph_is_what_a_compile_of_the_model_reads(tiny_dir, tmp_path, capsys):
    """``tlm collect --graph compiled`` cuts the tasks from the graph ``tlm compile`` builds (batch
    norms folded, weights prepacked): a compile of the same model answers each collected task with
    its fastest record. From the default (exported) graph it answers none of those convolutions:
    their weights were measured in the model's own layout, other workloads."""
    from storage import Corpus

    collect = ["collect", "--strategy", "tlm", "--tlm-model", tiny_dir, "--model", "resnet50", "--small",
               "--tasks", "2", "--trials", "2", "--no-progress"]
    compile_ = ["compile", "--model", "resnet50", "--small", "--tlm-model", tiny_dir, "--no-torch-compile", "--json"]
    for graph in ("compiled", "exported"):
        assert main([*collect, "--graph", graph, "--corpus", str(tmp_path / graph)]) == 0
        capsys.readouterr()
        with Corpus.open(str(tmp_path / graph)) as corpus:
            keys = set(corpus.scan().column("workload_key").to_pylist())
            assert [r["params"]["prepack_weights"] for r in corpus.runs()] == [graph == "compiled"]
        assert main([*compile_, "--corpus", str(tmp_path / graph)]) == 0
        report = _report(capsys)
        from_corpus = {t["workload_key"] for t in report["per_task"] if t["source"] == "corpus"}
        assert len(keys) == 2 and from_corpus == (keys if graph == "compiled" else set())


@pytest.mark.slow
def test_collect_with_the_seeded_strategy_needs_a_cost_model_then_searches_from_the_models_candidates(
        tiny_dir, tmp_path, capsys):
    """The seeded search ranks with the cost model the server would (``ranker_for``): the model's
    own, else the key's shipped one; the shipped Zen 3 model has none of its own and the search
    refused it ("no cost model in models/tlm-small-znver3-2c"). A key with neither is refused."""
    import shutil

    from storage import Corpus

    argv = ["collect", "--strategy", "tlm-seeded", "--model", "resnet50", "--small", "--tasks", "1",
            "--trials", "20", "--corpus", str(tmp_path / "c"), "--no-progress"]
    bare = str(tmp_path / "bare")
    shutil.copytree(tiny_dir, bare)
    assert main([*argv, "--tlm-model", bare, "--hardware", "cpu-nowhere-2c"]) == 2
    assert "no cost model for cpu-nowhere-2c" in capsys.readouterr().err
    assert main([*argv, "--tlm-model", bare, "--hardware", "cpu-znver3-2c"]) == 0  # models/cost-models/cpu-znver3-2c
    assert "cpu-znver3-2c's shipped cost model" in capsys.readouterr().err
    with Corpus.open(str(tmp_path / "c")) as corpus:
        t = corpus.scan()
        assert set(t.column("tuner").to_pylist()) == {"tlm-seeded:bare"}
        assert t.num_rows <= 20, "the seeds and the search share one budget"
        phases = [json.loads(p)["trials"] for p in t.column("tuner_params").to_pylist()]
        # 16 seeds, 2 searched, 2 re-timing the finalists (not stored: the same programs). The
        # search may measure a seed's program again (its database's programs are not its own
        # picks): the corpus keeps a program once, the unit's count has every measurement.
        assert phases.count(16) == 16 and set(phases) <= {16, 2}, "the model's seeds were measured"
        [unit] = corpus.task_statuses()
        assert (unit["status"], unit["records"]) == ("done", 18), "then the search ran"


@pytest.mark.slow
def test_collect_with_the_pool_strategy_measures_the_served_pool_and_the_pool_trains_a_ranker(
        tiny_dir, tmp_path, capsys):
    """``--strategy tlm-pool`` measures every program a served ranked request picks from (greedy,
    samples, the rules' program) under ``tlm-pool:<model>``, and ``tlm cost-model fit --tuners
    tlm-pool:`` learns from those records alone."""
    import shutil

    from collectors.cost_model import CostModel
    from collectors.hardware import detect_hardware
    from collectors.tasks import task_from_index
    from storage import Corpus
    from tlm.model.network import load_model
    from tlm.service.catalog import ranker_for
    from tlm.service.generator import ranked_pool

    bare = str(tmp_path / "bare")
    shutil.copytree(tiny_dir, bare)
    corpus_dir = str(tmp_path / "c")
    argv = ["collect", "--strategy", "tlm-pool", "--tlm-model", bare, "--model", "resnet50", "--small", "--tasks", "1",
            "--trials", "6", "--corpus", corpus_dir, "--no-progress", "--hardware", "cpu-znver3-2c"]
    assert main([a if a != "6" else "257" for a in argv]) == 2
    assert main(argv) == 0 and "every one measured" in capsys.readouterr().err
    with Corpus.open(corpus_dir) as corpus:
        t = corpus.scan()
        assert set(t.column("tuner").to_pylist()) == {"tlm-pool:bare"}
        (w,) = corpus.workloads()
    hw = detect_hardware("cpu", key="cpu-znver3-2c")
    model, tok, _ = load_model(bare)
    pool = ranked_pool(task_from_index(w), hw, model, tok, ranker_for(bare, hw.key)[0], pool=6).candidates
    assert t.num_rows == len(pool) and any(c.origin == "rules" for c in pool)
    assert main(["cost-model", "fit", "--corpus", corpus_dir, "--hardware", "cpu-znver3-2c", "--held-out", "none",
                 "--out", str(tmp_path / "cm"), "--tuners", "tlm-pool:"]) == 0
    assert CostModel.load(str(tmp_path / "cm")).summary.records == sum(r is not None for r in t.column("latency_s").to_pylist())
