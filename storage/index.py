"""The SQL index of the corpus (SQLAlchemy Core): what exists, where, and how fast.

Tables (docs/ARCHITECTURE.md, "Storage", and docs/CONTRACTS.md):

- ``schema_version(version)``: one row. Code refuses an index whose version is newer than
  ``SCHEMA_VERSION`` (:class:`IndexVersionError`) and upgrades an older one in place.
- ``workloads(workload_key, task_name, tvmscript, mod_json, flops, op_kind, created_at)``:
  ``mod_json`` is ``tvm.ir.save_json`` of the task's IRModule, needed to export a MetaSchedule
  database (the TVMScript alone does not always re-parse in TVM 0.27).
- ``workload_models(workload_key, model, weight)``: which models a workload occurs in, how often.
- ``hardware(key, target_json, description, created_at)``.
- ``parts(part_id, path, hardware_key, rows, sha256, bytes, created_at)``: ``path`` is relative to
  the corpus root, so a corpus directory can move.
- ``records(record_id, workload_key, hw_id, latency_s, part_id, row_idx)``: one row per stored
  record; ``part_id``/``row_idx`` locate it. Stored compactly, because SQLite's insert speed at 1M
  rows is bound by how many b-tree pages a batch dirties (measured: 42k rows/s with text keys,
  93k rows/s compact, index 363 MB -> 162 MB): ``record_id`` as 16 bytes, ``workload_key`` as a
  signed 64-bit int, the hardware key as ``hw_id`` into ``hardware_ids(hw_id, key)``, and
  the part's path once in ``parts``. ``id_to_db``/``wk_to_db`` and inverses convert.
  Index ``ix_records_topk(workload_key, hw_id, latency_s)`` makes ``top_k`` an index range scan.
- ``top_payloads(record_id, payload)``: a cache of whole records (JSON) for the fastest
  ``TOP_CACHE`` records of each (workload, hardware) at the time they were appended, written in
  the append's transaction (a record outside that set when appended can never re-enter it, so
  for k <= TOP_CACHE every answer has a payload). ``top_k`` reads them instead of decoding a Parquet row group per part
  (10 parts x ~1 ms); ids without a payload (k > TOP_CACHE, after reindex) fall back to Parquet.
  Parts remain the only truth; ``reindex`` drops payloads of records that no longer exist.
- ``runs(run_id, kind, status, started_at, finished_at, params_json, driver_json)``: ``driver_json``
  (added in schema version 3) names the process that runs it (host, pid, start time), so a run
  whose driver died without a word is found and marked "interrupted" (storage/runs.py).
- ``models(model_id, hardware_key, base_model_id, path, metrics_json, created_at, data_snapshot)``:
  ``data_snapshot`` (added in schema version 2) names the corpus snapshot a model was trained on.
- ``task_status(workload_key, hardware_key, tuner, trials, status, run_id, records, updated_at)``:
  lets a collection job skip a (task, hardware, tuner, budget) already done.

SQLite (the default) runs in WAL mode with a 60 s busy timeout and ``synchronous=NORMAL``; write
transactions start with ``BEGIN IMMEDIATE`` so two writers queue instead of failing on a lock
upgrade. Any other SQLAlchemy URL (PostgreSQL via psycopg2) works unchanged.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import time
import zlib
from typing import Any, Iterator, Mapping

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from storage.errors import CorpusError, IndexUnavailable, IndexVersionError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3  # bump when tables change; add the upgrade step to _upgrade (2: models.data_snapshot, 3: runs.driver_json)
MAX_REGISTER_ATTEMPTS = 20  # retries of a write refused by a concurrent writer before giving up (each one means real contention)

metadata = sa.MetaData()

schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer, nullable=False))

workloads = sa.Table(
    "workloads",
    metadata,
    sa.Column("workload_key", sa.String(16), primary_key=True),
    sa.Column("task_name", sa.Text),
    sa.Column("tvmscript", sa.Text),
    sa.Column("mod_json", sa.Text),
    sa.Column("flops", sa.Float),
    sa.Column("op_kind", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True)),
)

workload_models = sa.Table(
    "workload_models",
    metadata,
    sa.Column("workload_key", sa.String(16), primary_key=True),
    sa.Column("model", sa.Text, primary_key=True),
    sa.Column("weight", sa.Float),
)

hardware = sa.Table(
    "hardware",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("target_json", sa.Text),
    sa.Column("description", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True)),
)

parts = sa.Table(
    "parts",
    metadata,
    sa.Column("part_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("path", sa.String(400), nullable=False, unique=True),
    sa.Column("hardware_key", sa.String(200), nullable=False),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sqlite_autoincrement=True,  # never reuse an id of a removed part
)

hardware_ids = sa.Table(
    "hardware_ids",
    metadata,
    sa.Column("hw_id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(200), nullable=False, unique=True),
    sqlite_autoincrement=True,
)

records = sa.Table(
    "records",
    metadata,
    sa.Column("record_id", sa.LargeBinary(16), primary_key=True),  # the 32 hex digits as 16 bytes
    sa.Column("workload_key", sa.BigInteger, nullable=False),  # the 16 hex digits as a signed 64-bit int
    sa.Column("hw_id", sa.Integer, nullable=False),  # hardware_ids.hw_id
    sa.Column("latency_s", sa.Float),
    sa.Column("part_id", sa.Integer, nullable=False),
    sa.Column("row_idx", sa.Integer, nullable=False),
    sa.Index("ix_records_topk", "workload_key", "hw_id", "latency_s"),
    sqlite_with_rowid=False,  # the primary key is the table's only b-tree: smaller, faster inserts
)


def id_to_db(record_id: str) -> bytes:
    """A 32-hex record id as stored in ``records.record_id``."""
    return bytes.fromhex(record_id)


def id_from_db(raw: bytes) -> str:
    return bytes(raw).hex()


def wk_to_db(workload_key: str) -> int:
    """A 16-hex workload key as stored in ``records.workload_key`` (two's complement int64)."""
    v = int(workload_key, 16)
    return v - (1 << 64) if v >= (1 << 63) else v


def wk_from_db(v: int) -> str:
    return f"{v & ((1 << 64) - 1):016x}"


top_payloads = sa.Table(
    "top_payloads",
    metadata,
    sa.Column("record_id", sa.LargeBinary(16), primary_key=True),
    sa.Column("payload", sa.LargeBinary, nullable=False),  # zlib(JSON of the full record), ~0.8 KB
    # a rowid table: rows up to ~4 KB stay on their page (a WITHOUT ROWID row over ~1 KB spills
    # to overflow pages: measured 477 MB on disk for 178 MB of payload)
)


def payload_to_db(row: Mapping[str, Any]) -> bytes:
    """A record row as stored in ``top_payloads.payload``: zlib-compressed JSON, datetimes as ISO 8601."""
    text = json.dumps({k: (v.isoformat() if isinstance(v, _dt.datetime) else v) for k, v in row.items()})
    return zlib.compress(text.encode(), 6)


def payload_from_db(blob: bytes) -> dict:
    row = json.loads(zlib.decompress(blob))
    row["created_at"] = _dt.datetime.fromisoformat(row["created_at"])
    return row

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("params_json", sa.Text),
    sa.Column("driver_json", sa.Text),  # version 3: the process that runs it (storage/runs.py)
)

models = sa.Table(
    "models",
    metadata,
    sa.Column("model_id", sa.String(200), primary_key=True),
    sa.Column("hardware_key", sa.String(200)),
    sa.Column("base_model_id", sa.String(200)),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("metrics_json", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("data_snapshot", sa.Text),  # version 2; last so that an upgraded index has the same column order
)

task_status = sa.Table(
    "task_status",
    metadata,
    sa.Column("workload_key", sa.String(16), primary_key=True),
    sa.Column("hardware_key", sa.String(200), primary_key=True),
    sa.Column("tuner", sa.String(100), primary_key=True),
    sa.Column("trials", sa.Integer, primary_key=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(64)),
    sa.Column("records", sa.Integer),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


def _sqlite_events(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see _on_begin)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=60000")
        cur.execute("PRAGMA page_size=8192")  # only takes effect on a new file; fewer b-tree levels at 1M rows
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA journal_size_limit=67108864")  # truncate the WAL back to 64 MiB after checkpoints
        cur.execute("PRAGMA cache_size=-262144")  # up to 256 MiB page cache: random-key inserts into a 1M-row index
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")


def safe_url(url: str | sa.URL) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as given
        return str(url)


def create_engine(url: str) -> Engine:
    """An engine for ``url``, connected once to prove it works; :class:`IndexUnavailable` if not."""
    shown = safe_url(url)
    try:
        parsed = sa.make_url(url)
        kwargs = {}
        if parsed.get_backend_name() == "sqlite":
            kwargs["connect_args"] = {"timeout": 60}
        else:
            kwargs["pool_pre_ping"] = True
            if parsed.get_backend_name() == "postgresql":
                kwargs["connect_args"] = {"connect_timeout": 10}
        engine = sa.create_engine(parsed, **kwargs)
        if parsed.get_backend_name() == "sqlite":
            _sqlite_events(engine)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - every failure to open becomes one clear error
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IndexUnavailable(f"cannot open the corpus index at {shown}: {reason}") from exc
    return engine


def ensure_schema(engine: Engine) -> int:
    """Create missing tables, check/upgrade the version; return the version found or written."""
    shown = safe_url(engine.url)
    for attempt in range(5):
        try:
            with write(engine) as conn:
                metadata.create_all(conn, checkfirst=True)
                found = conn.execute(sa.select(schema_version.c.version)).scalars().all()
                if not found:
                    conn.execute(schema_version.insert().values(version=SCHEMA_VERSION))
                    return SCHEMA_VERSION
                version = max(found)
                if version > SCHEMA_VERSION:
                    raise IndexVersionError(
                        f"the corpus index at {shown} has schema version {version}, newer than this code's "
                        f"{SCHEMA_VERSION}; upgrade tlm-cluster before using it (refusing to touch it)"
                    )
                if version < SCHEMA_VERSION:
                    _upgrade(conn, version)
                return version
        except (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError) as exc:
            # Two processes creating the same fresh index race on CREATE TABLE: retry once it exists.
            if attempt == 4:
                raise IndexUnavailable(f"cannot create the corpus index tables at {shown}: {exc}") from exc
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _upgrade(conn: Connection, version: int) -> None:
    """Bring an index at ``version`` up to ``SCHEMA_VERSION``, one step per version, in the
    caller's transaction (so two processes opening an old index upgrade it once)."""
    if version < 2:
        _add_column(conn, models.c.data_snapshot)
    if version < 3:
        _add_column(conn, runs.c.driver_json)
    conn.execute(sa.update(schema_version).values(version=SCHEMA_VERSION))
    log.info("upgraded the corpus index at %s from schema version %d to %d", safe_url(conn.engine.url), version, SCHEMA_VERSION)


def _add_column(conn: Connection, column: sa.Column) -> None:
    """``ALTER TABLE ... ADD COLUMN`` unless the table already has it (``create_all`` made the
    table at the new shape when it was missing)."""
    table = column.table.name
    if column.name in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
        return
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column.name} {column.type.compile(conn.dialect)}")


def now() -> _dt.datetime:
    """The current time, timezone-aware UTC: every ``created_at``/``updated_at`` the index stores."""
    return _dt.datetime.now(_dt.timezone.utc)


def utc_row(row: Mapping[str, Any]) -> dict:
    """A row as a dict with every datetime timezone-aware UTC (SQLite hands back naive ones)."""
    return {
        k: (v.replace(tzinfo=_dt.timezone.utc) if isinstance(v, _dt.datetime) and v.tzinfo is None else v)
        for k, v in row.items()
    }


def upsert(engine: Engine, table: sa.Table, key: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    """Insert the row ``key`` with ``values``, or update ``values`` of the existing one.

    Not a dialect-specific ``ON CONFLICT``: this stays one portable statement pair, retried when a
    concurrent writer inserts the same key between our check and our insert.
    """
    cond = sa.and_(*(table.c[k] == v for k, v in key.items()))
    for _ in range(MAX_REGISTER_ATTEMPTS):
        try:
            with write(engine) as conn:
                if conn.execute(sa.select(sa.literal(1)).select_from(table).where(cond)).first():
                    if values:
                        conn.execute(sa.update(table).where(cond).values(**values))
                else:
                    conn.execute(sa.insert(table).values(**key, **values))
            return
        except sa.exc.IntegrityError:  # a concurrent insert of the same key: update it instead
            continue
    raise CorpusError(f"could not write {table.name} row {dict(key)} after {MAX_REGISTER_ATTEMPTS} attempts")


def existing_record_ids(conn: Connection, ids: list[str], chunk: int = 5000) -> set[str]:
    """The subset of ``ids`` (hex) already in ``records`` (driver-level query: SQLAlchemy's
    per-call compilation of a 5000-item IN list costs more than the lookup itself)."""
    found: set[str] = set()
    dialect = conn.dialect.name
    for i in range(0, len(ids), chunk):
        part = [bytes.fromhex(x) for x in ids[i : i + chunk]]
        if dialect == "sqlite":
            sql = f"SELECT record_id FROM records WHERE record_id IN ({','.join('?' * len(part))})"
            found.update(bytes(r[0]).hex() for r in conn.exec_driver_sql(sql, tuple(part)))
        elif dialect == "postgresql":
            rows = conn.exec_driver_sql("SELECT record_id FROM records WHERE record_id = ANY(%(ids)s)", {"ids": part})
            found.update(bytes(r[0]).hex() for r in rows)
        else:
            col = records.c.record_id
            found.update(bytes(r).hex() for r in conn.execute(sa.select(col).where(col.in_(part))).scalars())
    return found


def insert_records(conn: Connection, rows: list[tuple]) -> None:
    """Insert ``(record_id hex, workload_key hex, hw_id, latency_s, part_id, row_idx)`` tuples.

    SQLite gets the driver's ``executemany`` directly (~5x faster than Core for 50k rows);
    other backends go through Core (batched multi-row INSERTs).
    """
    if not rows:
        return
    rows = [(bytes.fromhex(r), wk_to_db(w), h, lat, p, i) for r, w, h, lat, p, i in rows]
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql(
            "INSERT INTO records (record_id, workload_key, hw_id, latency_s, part_id, row_idx) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
    else:
        names = ("record_id", "workload_key", "hw_id", "latency_s", "part_id", "row_idx")
        conn.execute(sa.insert(records), [dict(zip(names, r)) for r in rows])


@contextlib.contextmanager
def write(engine: Engine) -> Iterator[Connection]:
    """A write transaction (``BEGIN IMMEDIATE`` on SQLite); commits on success, rolls back on error."""
    with engine.connect().execution_options(write=True) as conn:
        with conn.begin():
            yield conn


@contextlib.contextmanager
def read(engine: Engine) -> Iterator[Connection]:
    """A read-only transaction (one consistent snapshot)."""
    with engine.connect() as conn:
        with conn.begin():
            yield conn
