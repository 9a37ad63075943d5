"""Fixtures of the storage tests: a corpus per test, on SQLite and (when available) PostgreSQL.

Index tests take the ``index_url`` fixture, parametrised over ``sqlite`` (the default file
index) and ``postgres``. The PostgreSQL variant needs ``TLM_TEST_PG_URL`` (set by
``eval "$(bash scripts/start_postgres.sh)"`` in .ci/run); each test gets a fresh database.
"""
from __future__ import annotations

import os
import uuid

import pytest

from storage_synth import make_records

PG_ENV = "TLM_TEST_PG_URL"
HW = "cpu-znver4-2c"


def _pg_database():
    import sqlalchemy as sa

    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} is not set: no PostgreSQL server for the index tests "
                    "(run `eval \"$(bash scripts/start_postgres.sh)\"` to start one)")
    url = sa.make_url(base)
    name = f"tlm_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def index_url(request):
    """None for the default SQLite index, or the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
    else:
        yield from _pg_database()


@pytest.fixture
def corpus(tmp_path, index_url):
    from storage import Corpus

    c = Corpus.open(tmp_path / "corpus", index_url=index_url)
    yield c
    c.close()


@pytest.fixture
def records():
    """The ``make_records`` helper, as a fixture."""
    return make_records
