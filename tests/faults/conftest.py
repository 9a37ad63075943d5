"""The fault-injection suite: each test does one fault to a real part of the system and records a
row (fault, where, outcome, lost, duplicated) of ``bench/results/reliability.json``'s table
(``fault_row``, tests/conftest.py: Ray-mode faults live beside the simulated cluster, in
tests/cluster/test_collect_job.py, marked ``faults`` too).

``lost`` and ``duplicated`` are counted, not assumed: records the job reported stored that cannot
be read back, and rows beyond the distinct record ids. Rows go to ``$TLM_FAULT_TABLE`` (JSON lines)
when it is set (``bench/reliability.py`` sets it); the assertions hold either way.
"""
from __future__ import annotations

import os
from typing import Iterable

import pyarrow.compute as pc
import pytest

from tests.helpers.records import check_consistent, index_snapshot



def pytest_collection_modifyitems(config, items):
    """Every test under tests/faults carries the ``faults`` marker (a conftest's pytestmark would not)."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.faults)


def audit(corpus, reported_ids: Iterable[str] = (), *, recover: bool = False) -> tuple[int, int]:
    """After a fault: ``verify`` passes, the index equals what ``reindex`` rebuilds from the parts,
    and the index agrees with the parts row for row. Returns (lost, duplicated): ids reported
    stored that are not readable, and rows beyond the distinct ids.

    ``recover``: first the documented recovery after a killed writer, ``tlm corpus reindex``
    (it removes the writer's temporary file and registers a complete part it had not)."""
    if recover:
        corpus.reindex()
    report = corpus.verify()
    assert report.ok, report.lines()
    before = index_snapshot(corpus)
    corpus.reindex()
    assert index_snapshot(corpus) == before, "the index differs from the one reindex rebuilds"
    check_consistent(corpus)
    ids = corpus.scan(columns=["record_id"])["record_id"]
    present = set(ids.to_pylist())
    lost = len(set(reported_ids) - present)
    duplicated = len(ids) - pc.count_distinct(ids).as_py()
    return lost, duplicated
