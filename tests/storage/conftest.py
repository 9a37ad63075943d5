"""Fixtures of the storage tests: a corpus per test, on SQLite and (when available) PostgreSQL.

Index tests take the ``index_url`` fixture, parametrised over ``sqlite`` (the default file
index) and ``postgres``; the ``corpus`` and ``corpus_root`` fixtures are also parametrised over a
plain path and a ``file://`` URI root. The PostgreSQL variant needs ``TLM_TEST_PG_URL`` (set by
``eval "$(bash scripts/start_postgres.sh)"`` in .ci/run); each test gets a fresh database.
"""
from __future__ import annotations

import os

import pytest

from storage_synth import make_records
from tests.pg import fresh_pg_database

PG_ENV = "TLM_TEST_PG_URL"
HW = "cpu-znver4-2c"


def _pg_database():
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} is not set: no PostgreSQL server for the index tests "
                    "(run `eval \"$(bash scripts/start_postgres.sh)\"` to start one)")
    with fresh_pg_database(base, "tlm_test") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index_url(request):
    """None for the default SQLite index, or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
    else:
        yield from _pg_database()


@pytest.fixture(params=["path", "file-uri"])
def corpus_root(request, tmp_path):
    """Where a test's corpus lives: a plain path (fsync + rename), or the same directory as a
    ``file://`` URI, which takes the ``pyarrow.fs`` code path of object stores (temp key + move,
    every read through the filesystem object)."""
    d = tmp_path / "corpus"
    return d if request.param == "path" else d.as_uri()


@pytest.fixture
def corpus(corpus_root, index_url):
    from storage import Corpus

    c = Corpus.open(corpus_root, index_url=index_url)
    yield c
    c.close()


@pytest.fixture
def records():
    """The ``make_records`` helper, as a fixture."""
    return make_records


def _relax_matmul():
    """A Relax module with one 64x64x64 matmul, fused by the "zero" pipeline (one task)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64, 64), "float32"))
    w = relax.Var("w", relax.TensorType((64, 64), "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.matmul(x, w)))
        bb.emit_func_output(out)
    return relax.get_pipeline("zero")(bb.get())


@pytest.fixture(scope="session")
def ms_database(request):
    """A real MetaSchedule JSON database: 8 trials of a 64x64x64 matmul on this CPU.

    Tuned once (about 40 s) and cached in pytest's cache dir, keyed by TVM version and CPU.
    Returns (work_dir, relax module, target dict, list of task modules).
    """
    import shutil

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from collectors import fast_import  # the ~16 s tensor-intrinsic import trap, avoided on CPU

    fast_import.install()
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    target = {"kind": "llvm", "mcpu": cpu, "num-cores": 2}
    mod = _relax_matmul()
    tasks = [t.dispatched[0] for t in ms.relax_integration.extract_tasks(mod, tvm.target.Target(target))]
    cache = request.config.cache.mkdir(f"tlm-storage-msdb-{tvm.__version__}-{cpu}")
    done = cache / "DONE"
    if not done.exists():
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        ms.relax_integration.tune_relax(
            mod, params={}, target=tvm.target.Target(target), work_dir=str(cache), max_trials_global=8,
            num_trials_per_iter=8, builder=ms.builder.LocalBuilder(initializer=fast_import.install),
        )
        done.write_text("ok\n")
    return cache, mod, target, tasks
