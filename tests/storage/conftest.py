"""Fixtures of the storage tests: a corpus per test, on SQLite and (when available) PostgreSQL.

Index tests take the ``index_url`` fixture, parametrised over ``sqlite`` (the default file
index) and ``postgres``; the ``corpus`` and ``corpus_root`` fixtures are also parametrised over a
plain path and a ``file://`` URI root. The PostgreSQL variant needs ``TLM_TEST_PG_URL`` (set by
``eval "$(bash scripts/start_postgres.sh)"`` in .ci/run); each test gets a fresh database.
"""
from __future__ import annotations

import os

import pytest

from tests.helpers.records import make_records
from tests.helpers.pg import fresh_pg_database

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
