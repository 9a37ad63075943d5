"""The Arrow schema of one measured record, its typed form ``Record``, record ids, and
validation of incoming records.

One row is one measured candidate schedule (docs/CONTRACTS.md, "Record columns"). The schema is
strict on purpose: a typo in a column name or a latency given as a string would otherwise be
stored forever, so ``to_record_table`` refuses unknown, missing-required and mistyped columns
with one :class:`~storage.errors.SchemaMismatch` that names the column.

Required columns: ``workload_key``, ``hardware_key``, ``trace_json``. ``record_id`` and
``created_at`` are filled when missing; every other column may be absent (null, or its
default: ``sketch_id`` -1, ``run_secs`` empty). A record must carry exactly one of
``latency_s`` and ``error``: failures are data, never latencies.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import BadHardwareKey, SchemaMismatch

#: Shape of a hardware key: the one definition (collectors import it from here; it also keeps a
#: key safe as a ``hardware=<key>`` directory name).
HARDWARE_KEY_RE = re.compile(r"^(cpu|cuda)-[a-z0-9_.]+(-[a-z0-9_.]+)*$")
#: Shape of a workload key: 16 lowercase hex digits of a 64-bit structural hash.
WORKLOAD_KEY_RE = re.compile(r"^[0-9a-f]{16}$")

RECORD_SCHEMA = pa.schema(
    [
        pa.field("record_id", pa.string(), nullable=False),
        pa.field("workload_key", pa.string(), nullable=False),
        pa.field("hardware_key", pa.string(), nullable=False),
        pa.field("target", pa.string()),
        pa.field("task_name", pa.string()),
        pa.field("sketch_id", pa.int32()),
        pa.field("trace_json", pa.string(), nullable=False),
        pa.field("decisions_json", pa.string()),
        pa.field("run_secs", pa.list_(pa.float64())),
        pa.field("latency_s", pa.float64()),
        pa.field("error", pa.string()),
        pa.field("tuner", pa.string()),
        pa.field("tuner_params", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("node", pa.string()),
        pa.field("tvm_version", pa.string()),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("args_info_json", pa.string()),
        pa.field("host_load", pa.float64()),
    ]
)

REQUIRED_COLUMNS = ("workload_key", "hardware_key", "trace_json")


@dataclass(kw_only=True)
class Record:
    """One measured candidate schedule as a typed value: exactly the columns of ``RECORD_SCHEMA``,
    same names, same order, so stages (tuner, generator) pass records without dict-key typos.

    Required: ``workload_key``, ``hardware_key``, ``trace_json``, and one of ``latency_s``/``error``
    (checked by ``to_record_table``, not here: failures are data). ``Record(**row)`` rebuilds one
    from a row of ``Corpus.scan().to_pylist()``.
    """

    record_id: str | None = None  # make_record_id(...); filled by append when None
    workload_key: str  # 16 lowercase hex digits (structural hash of the task's IRModule)
    hardware_key: str  # HARDWARE_KEY_RE, e.g. "cpu-znver4-2c"
    target: str | None = None  # TVM target as JSON (dict form)
    task_name: str | None = None  # MetaSchedule task name
    sketch_id: int = -1  # index of the design-space sketch the trace came from; -1 unknown
    trace_json: str  # Trace.as_json() made plain JSON: [insts, decisions]
    decisions_json: str | None = None  # the decisions part alone: [[inst_index, value], ...]
    run_secs: list[float] = field(default_factory=list)  # every timed run in seconds; empty on error
    latency_s: float | None = None  # median of run_secs; None on error
    error: str | None = None  # None on success; else why it failed (build error, run error, wrong answer: ...)
    tuner: str | None = None  # "evolutionary", "replay-trace", "ms-import", "tlm", ...
    tuner_params: str | None = None  # JSON of the tuner's parameters (trials, seed, cost model, ...)
    run_id: str | None = None  # collection run that produced it
    node: str | None = None  # host name that measured it
    tvm_version: str | None = None  # tvm.__version__
    created_at: _dt.datetime | None = None  # when measured (UTC); filled with the append time when None
    args_info_json: str | None = None  # MetaSchedule args_info JSON (needed to export a JSONDatabase)
    host_load: float | None = None  # cores other processes kept busy while it was timed; None: not known


def conform(table: pa.Table) -> pa.Table:
    """A table read from a part as ``RECORD_SCHEMA``: columns added to the schema after the part
    was written (``host_load``) come back null, as a dataset read with the schema gives them."""
    for f in RECORD_SCHEMA:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.select(RECORD_SCHEMA.names).replace_schema_metadata(None).cast(RECORD_SCHEMA)


def _record_as_row(record: Record) -> dict[str, Any]:
    """A Record as the dict ``to_record_table`` validates (every column present)."""
    return {name: getattr(record, name) for name in RECORD_SCHEMA.names}


def canonical_json(text: str) -> str:
    """A JSON text in one canonical spelling, so equal traces hash equally."""
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def make_record_id(workload_key: str, hardware_key: str, trace_json: str) -> str:
    """First 32 hex digits of sha256 over ``workload_key \\n hardware_key \\n canonical trace``.

    The id is a content hash so that re-measuring the same schedule on the same hardware
    (a resumed or repeated collection) is recognised and stored once.
    """
    try:
        canon = canonical_json(trace_json)
    except (TypeError, ValueError) as exc:
        raise SchemaMismatch(f"trace_json is not valid JSON: {str(trace_json)[:80]!r} ({exc})") from None
    h = hashlib.sha256(f"{workload_key}\n{hardware_key}\n{canon}".encode())
    return h.hexdigest()[:32]


def check_hardware_key(key: str) -> str:
    """Return ``key`` if it has the hardware-key shape, else raise :class:`BadHardwareKey`."""
    if not isinstance(key, str) or not HARDWARE_KEY_RE.match(key):
        raise BadHardwareKey(f"hardware key {key!r} does not match {HARDWARE_KEY_RE.pattern}")
    return key


def check_workload_key(key: str) -> str:
    """Return ``key`` if it is 16 lowercase hex digits, else raise :class:`SchemaMismatch`."""
    if not isinstance(key, str) or not WORKLOAD_KEY_RE.match(key):
        raise SchemaMismatch(f"workload key {key!r} is not 16 lowercase hex digits")
    return key


def _same_family(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``have`` may be cast to ``want`` without changing its meaning."""
    if have == want or pa.types.is_null(have):
        return True
    if pa.types.is_string(want):
        return pa.types.is_string(have) or pa.types.is_large_string(have)
    if pa.types.is_integer(want):
        return pa.types.is_integer(have)
    if pa.types.is_floating(want):
        return pa.types.is_floating(have) or pa.types.is_integer(have)
    if pa.types.is_timestamp(want):
        return pa.types.is_timestamp(have)
    if pa.types.is_list(want):
        return (pa.types.is_list(have) or pa.types.is_large_list(have)) and _same_family(
            have.value_type, want.value_type
        )
    return False


def _column_from_values(name: str, values: list[Any], typ: pa.DataType) -> pa.Array:
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        bad = next((v for v in values if v is not None and not _fits(v, typ)), None)
        raise SchemaMismatch(
            f"column {name!r} must be {typ}; got {type(bad).__name__} value {bad!r:.80} ({exc})"
        ) from None


def _fits(value: Any, typ: pa.DataType) -> bool:
    try:
        pa.array([value], type=typ)
        return True
    except Exception:  # noqa: BLE001 - only used to find the offending value for the message
        return False


def to_record_table(
    records: "list[dict | Record] | pa.Table | pa.RecordBatch", *, now: _dt.datetime | None = None
) -> pa.Table:
    """Validate ``records`` (dicts, :class:`Record` s, or an Arrow table) and return them as a
    table with exactly ``RECORD_SCHEMA``.

    Fills ``record_id`` (``make_record_id``) and ``created_at`` (``now``, UTC) where missing,
    ``sketch_id`` with -1 and ``run_secs`` with ``[]``. Raises :class:`SchemaMismatch` or
    :class:`BadHardwareKey` naming the first problem found. The steps: the columns given
    (:func:`_columns_of`), the keys (:func:`_check_keys`), the defaults (:func:`_fill_defaults`),
    one outcome per record (:func:`_check_outcomes`), the ids.
    """
    now = now or _dt.datetime.now(_dt.timezone.utc)
    cols, n = _columns_of(records)
    _check_keys(cols)
    _fill_defaults(cols, n, now)
    _check_outcomes(cols, n)
    if "record_id" not in cols or cols["record_id"].null_count:
        have = cols["record_id"].to_pylist() if "record_id" in cols else [None] * n
        wk, hw, tr = (cols[c].to_pylist() for c in ("workload_key", "hardware_key", "trace_json"))
        cols["record_id"] = pa.array(
            [rid if rid is not None else make_record_id(wk[i], hw[i], tr[i]) for i, rid in enumerate(have)],
            pa.string(),
        )
    arrays = [cols.get(f.name, pa.nulls(n, f.type)) for f in RECORD_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=RECORD_SCHEMA)


def _columns_of(records: Any) -> tuple[dict[str, Any], int]:
    """``({column: array}, rows)`` of the columns the records hold, typed as the schema says;
    unknown columns and non-record items are refused."""
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if isinstance(records, pa.Table):
        return _columns_from_table(records), records.num_rows
    if isinstance(records, Iterable) and not isinstance(records, (str, bytes, dict)):
        rows = [_record_as_row(r) if isinstance(r, Record) else r for r in records]
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise SchemaMismatch(f"record {i} is a {type(r).__name__}, expected a dict or a Record")
        names = {k for r in rows for k in r}
        unknown = sorted(names - set(RECORD_SCHEMA.names))
        if unknown:
            raise SchemaMismatch(f"unknown column(s) {unknown}; known: {RECORD_SCHEMA.names}")
        cols = {f.name: _column_from_values(f.name, [r.get(f.name) for r in rows], f.type)
                for f in RECORD_SCHEMA if f.name in names}
        return cols, len(rows)
    raise SchemaMismatch(f"records must be a list of dicts or Records, or a pyarrow Table, got {type(records).__name__}")


def _check_keys(cols: dict[str, Any]) -> None:
    """Every required column present without nulls; hardware and workload keys well formed."""
    for name in REQUIRED_COLUMNS:
        if name not in cols:
            raise SchemaMismatch(f"required column {name!r} is missing")
        if cols[name].null_count:
            raise SchemaMismatch(f"required column {name!r} has {cols[name].null_count} null value(s)")
    for key in pc.unique(cols["hardware_key"]).to_pylist():
        check_hardware_key(key)
    wk_ok = pc.match_substring_regex(cols["workload_key"], WORKLOAD_KEY_RE.pattern)
    if pc.any(pc.invert(wk_ok)).as_py():  # (pc.all of an empty column is null, not True)
        bad = pc.filter(cols["workload_key"], pc.invert(wk_ok))[0].as_py()
        check_workload_key(bad)


def _fill_defaults(cols: dict[str, Any], n: int, now: _dt.datetime) -> None:
    """``sketch_id`` -1, ``run_secs`` [] and ``created_at`` ``now`` where missing (in place)."""
    if "sketch_id" not in cols:
        cols["sketch_id"] = pa.array([-1] * n, pa.int32())
    else:
        cols["sketch_id"] = pc.fill_null(cols["sketch_id"], -1)
    if "run_secs" not in cols:
        cols["run_secs"] = pa.array([[]] * n, pa.list_(pa.float64()))
    elif cols["run_secs"].null_count:
        cols["run_secs"] = pa.array([v if v is not None else [] for v in cols["run_secs"].to_pylist()], pa.list_(pa.float64()))
    if "created_at" not in cols:
        cols["created_at"] = pa.array([now] * n, pa.timestamp("us", tz="UTC"))
    else:
        cols["created_at"] = pc.fill_null(cols["created_at"], pa.scalar(now, pa.timestamp("us", tz="UTC")))


def _check_outcomes(cols: dict[str, Any], n: int) -> None:
    """Every record has exactly one of ``latency_s`` (> 0) and ``error``: a failure has no latency."""
    latency = cols.get("latency_s", pa.nulls(n, pa.float64()))
    error = cols.get("error", pa.nulls(n, pa.string()))
    both = pc.and_(pc.is_valid(latency), pc.is_valid(error))
    neither = pc.and_(pc.is_null(latency), pc.is_null(error))
    if pc.any(both).as_py():
        i = pc.index(both, True).as_py()
        raise SchemaMismatch(f"record {i} has both latency_s and error ({error[i].as_py()!r:.80}); a failure has no latency")
    if pc.any(neither).as_py():
        i = pc.index(neither, True).as_py()
        raise SchemaMismatch(f"record {i} has neither latency_s nor error; one of them is required")
    bad_lat = pc.fill_null(pc.or_(pc.less_equal(latency, 0.0), pc.is_nan(latency)), False)
    if pc.any(bad_lat).as_py():
        i = pc.index(bad_lat, True).as_py()
        raise SchemaMismatch(f"record {i} has latency_s {latency[i].as_py()!r}; it must be > 0")


def _columns_from_table(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    unknown = sorted(set(table.column_names) - set(RECORD_SCHEMA.names))
    if unknown:
        raise SchemaMismatch(f"unknown column(s) {unknown}; known: {RECORD_SCHEMA.names}")
    cols = {}
    for name in table.column_names:
        want = RECORD_SCHEMA.field(name).type
        have = table.schema.field(name).type
        if not _same_family(have, want):
            raise SchemaMismatch(f"column {name!r} has type {have}, expected {want}")
        col = table.column(name).combine_chunks()
        if have != want:
            try:
                col = col.cast(want, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatch(f"column {name!r} of type {have} does not fit {want}: {exc}") from None
        cols[name] = col
    return cols


def first_of_each_id(table: pa.Table) -> pa.Table:
    """Keep the first row of each record id: a batch may repeat a measurement, and the index
    stores an id once."""
    ids = table["record_id"]
    if pc.count_distinct(ids).as_py() == table.num_rows:
        return table
    first = table.append_column("_i", pa.array(range(table.num_rows), pa.int64())).group_by("record_id").aggregate([("_i", "min")])
    keep = pc.is_in(pa.array(range(table.num_rows), pa.int64()), first["_i_min"])
    return table.filter(keep)
