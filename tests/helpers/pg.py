"""A throw-away PostgreSQL database per test, on the server ``TLM_TEST_PG_URL`` names."""
from __future__ import annotations

import contextlib
import uuid
from typing import Iterator


@contextlib.contextmanager
def fresh_pg_database(base_url: str, prefix: str) -> Iterator[str]:
    """Create a database named ``<prefix>_<random>``, yield its URL, drop it afterwards."""
    import sqlalchemy as sa

    url = sa.make_url(base_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
