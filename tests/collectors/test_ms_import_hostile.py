"""Hostile MetaSchedule JSON databases (issue 22): a truncated line, a field of the wrong type, an
out-of-range workload index or a trace naming an unknown instruction is one ``CorpusError`` that
names the file and line, never another exception, and never a record stored under the wrong
workload. Property-based: hypothesis mutates a real tuned database's lines."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.ms_database import import_ms
from storage import Corpus, CorpusError

RECORDS = "database_tuning_record.json"
JSONS = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=8)


def _import_one(tmp_path_factory, ms_database, line: str):
    work_dir = ms_database[0]
    copy = tmp_path_factory.mktemp("db")
    shutil.copy(work_dir / "database_workload.json", copy)
    (copy / RECORDS).write_text(line + "\n")
    with Corpus.open(tmp_path_factory.mktemp("c")) as c:
        return import_ms(c, copy), c.scan().num_rows


def _first_record(ms_database) -> list:
    return json.loads((ms_database[0] / RECORDS).read_text().splitlines()[0])


_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(cut=st.integers(min_value=1, max_value=10_000))
def test_a_truncated_line_is_one_error_naming_it(tmp_path_factory, ms_database, cut):
    line = json.dumps(_first_record(ms_database))
    line = line[: cut % len(line)] or "["
    with pytest.raises(CorpusError, match=rf"{RECORDS}:1: "):
        _import_one(tmp_path_factory, ms_database, line)


@_SETTINGS
@given(where=st.sampled_from(["index", "trace", "run_secs", "target", "args_info", "whole"]), value=JSONS)
def test_a_field_of_any_type_is_imported_or_refused_by_line(tmp_path_factory, ms_database, where, value):
    rec = _first_record(ms_database)
    if where == "index":
        rec[0] = value
    elif where == "whole":
        rec = value
    else:
        rec[1][["trace", "run_secs", "target", "args_info"].index(where)] = value
    try:
        report, rows = _import_one(tmp_path_factory, ms_database, json.dumps(rec))
    except CorpusError as exc:
        assert f"{RECORDS}:1: " in str(exc) or "hardware key" in str(exc), exc
    else:
        assert report.records == rows == 1


@pytest.mark.parametrize("index", [-1, 1, 10**30, True, 0.0])
def test_a_workload_index_that_names_no_workload_is_refused(tmp_path_factory, ms_database, index):
    rec = _first_record(ms_database)
    rec[0] = index
    with pytest.raises(CorpusError, match="workload index"):
        _import_one(tmp_path_factory, ms_database, json.dumps(rec))


def test_a_trace_with_an_unknown_instruction_is_refused(tmp_path_factory, ms_database):
    rec = _first_record(ms_database)
    rec[1][0][0][0][0] = "LaunchMissiles"
    with pytest.raises(CorpusError, match="LaunchMissiles"):
        _import_one(tmp_path_factory, ms_database, json.dumps(rec))
