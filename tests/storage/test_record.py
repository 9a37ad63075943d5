"""The typed ``Record``: exactly the columns of ``RECORD_SCHEMA``, appended like dicts."""
from __future__ import annotations

import dataclasses
import json

import pyarrow as pa
import pytest

from storage import RECORD_SCHEMA, Record, SchemaMismatch, make_record_id

HW = "cpu-znver4-2c"


def _record(i: int, **over) -> Record:
    trace = json.dumps([[["SamplePerfectTile", [], [4, 64], ["v"]]], [[0, [i, 1, 1, 1]]]])
    fields = dict(workload_key=f"{i % 2:016x}", hardware_key=HW, trace_json=trace, task_name=f"task{i % 2}",
                  run_secs=[1e-3 * (i + 1)] * 3, latency_s=1e-3 * (i + 1), tuner="test", sketch_id=i % 3)
    fields.update(over)
    return Record(**fields)


def test_fields_are_the_schema_columns_in_order():
    assert [f.name for f in dataclasses.fields(Record)] == RECORD_SCHEMA.names
    r = Record(workload_key="0123456789abcdef", hardware_key=HW, trace_json="[[], []]")
    assert (r.record_id, r.sketch_id, r.run_secs, r.latency_s, r.error, r.created_at) == (None, -1, [], None, None, None)
    with pytest.raises(TypeError):  # required fields have no default
        Record(workload_key="0123456789abcdef", hardware_key=HW)


def test_records_round_trip_through_scan(corpus):
    recs = [_record(i) for i in range(5)] + [_record(5, latency_s=None, run_secs=[], error="run error: synthetic")]
    res = corpus.append(recs)
    assert (res.rows, res.duplicates) == (6, 0)
    back = {r.record_id: r for r in (Record(**row) for row in corpus.scan().to_pylist())}
    assert len(back) == 6
    for rec in recs:
        rid = make_record_id(rec.workload_key, rec.hardware_key, rec.trace_json)
        got = back[rid]
        assert got.created_at is not None
        assert dataclasses.replace(got, created_at=None) == dataclasses.replace(rec, record_id=rid)
    assert corpus.append(recs).duplicates == 6  # the same Records again store nothing


def test_records_dicts_and_tables_mix(corpus):
    as_dict = {k: v for k, v in dataclasses.asdict(_record(1)).items() if v is not None}
    res = corpus.append([_record(0), as_dict])
    assert res.rows == 2
    table = pa.Table.from_pylist([dataclasses.asdict(_record(2))], schema=RECORD_SCHEMA)
    assert corpus.append(table).rows == 1 and corpus.scan().num_rows == 3


@pytest.mark.parametrize(
    "over, match",
    [
        ({"latency_s": None, "run_secs": []}, "neither latency_s nor error"),
        ({"latency_s": "fast"}, "column 'latency_s' must be double"),
        ({"workload_key": "xyz"}, "workload key 'xyz' is not 16 lowercase hex"),
    ],
)
def test_bad_records_refused(corpus, over, match):
    with pytest.raises(SchemaMismatch, match=match):
        corpus.append([_record(0, **over)])
    assert corpus.scan().num_rows == 0


def test_other_objects_refused(corpus):
    with pytest.raises(SchemaMismatch, match="record 1 is a tuple, expected a dict or a Record"):
        corpus.append([_record(0), ("not", "a record")])
