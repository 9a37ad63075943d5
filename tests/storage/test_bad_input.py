"""Bad input gets one clear error each, naming the bad value; nothing is stored."""
from __future__ import annotations

import pyarrow as pa
import pytest
import sqlalchemy as sa

from storage import BadHardwareKey, Corpus, IndexUnavailable, IndexVersionError, SchemaMismatch
from storage.index import SCHEMA_VERSION


def _good(**over):
    rec = {"workload_key": "0123456789abcdef", "hardware_key": "cpu-znver4-2c", "trace_json": "[[], []]", "latency_s": 1e-3}
    rec.update(over)
    return rec


@pytest.mark.parametrize(
    "rec, match",
    [
        ({k: v for k, v in _good().items() if k != "trace_json"}, "required column 'trace_json' is missing"),
        (_good(latency_s="fast"), "column 'latency_s' must be double"),
        (_good(sketch_id="three"), "column 'sketch_id' must be int32"),
        (_good(latncy_s=1.0), r"unknown column\(s\) \['latncy_s'\]"),
        (_good(workload_key="xyz"), "workload key 'xyz' is not 16 lowercase hex"),
        (_good(trace_json="not json"), "trace_json is not valid JSON"),
        (_good(error="boom"), "both latency_s and error"),
        (_good(latency_s=None), "neither latency_s nor error"),
        (_good(latency_s=-1.0), "latency_s -1.0"),
    ],
)
def test_wrong_records_refused(corpus, rec, match):
    with pytest.raises(SchemaMismatch, match=match):
        corpus.append([rec])
    assert corpus.stats()["records"] == 0 and corpus.scan().num_rows == 0


def test_mistyped_arrow_column_refused(corpus):
    table = pa.Table.from_pylist([_good()]).set_column(3, "latency_s", pa.array(["0.001"]))
    with pytest.raises(SchemaMismatch, match="column 'latency_s' has type string, expected double"):
        corpus.append(table)


@pytest.mark.parametrize("key", ["gpu-a100", "CPU-znver4-2c", "cpu", "cpu-Zen4", "cpu-znver4-2c/../x", ""])
def test_bad_hardware_key_refused(corpus, key):
    with pytest.raises(BadHardwareKey, match="does not match"):
        corpus.append([_good(hardware_key=key)])
    with pytest.raises(BadHardwareKey):
        corpus.register_hardware(key, target={"kind": "llvm"})
    assert corpus.scan().num_rows == 0


@pytest.mark.parametrize(
    "url, match",
    [
        ("sqlite:////nonexistent-dir/sub/index.sqlite", "unable to open database file"),
        ("nosuchdb://user@host/db", "Can't load plugin"),
        ("postgresql+psycopg2://u:secret@127.0.0.1:1/db", "127.0.0.1"),
        ("not a url at all", "Could not parse"),
    ],
)
def test_unreadable_index_url(tmp_path, url, match):
    with pytest.raises(IndexUnavailable, match=match) as err:
        Corpus.open(tmp_path / "c", index_url=url)
    assert str(err.value).startswith("cannot open the corpus index at")
    assert "secret" not in str(err.value)


def test_newer_index_refused(tmp_path, index_url):
    c = Corpus.open(tmp_path / "c", index_url=index_url)
    with c.engine.begin() as conn:
        conn.execute(sa.text("UPDATE schema_version SET version = 99"))
    c.close()
    with pytest.raises(IndexVersionError, match=f"schema version 99, newer than this code's {SCHEMA_VERSION}"):
        Corpus.open(tmp_path / "c", index_url=index_url)
