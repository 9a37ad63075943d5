"""The suite's deal to its xdist workers (tests/helpers/schedule.py): longest first, shared-fixture
files whole, a missing record never drops a test."""
from __future__ import annotations

from tests.helpers.schedule import UNKNOWN_S, load_durations, longest_first, store_durations, unit_of


def test_units_come_longest_first_and_a_shared_fixture_file_stays_whole():
    gpu = ["tests/tlm/test_gpu.py::test_a", "tests/tlm/test_gpu.py::test_b"]
    ids = ["tests/a.py::test_short", gpu[0], "tests/a.py::test_long", gpu[1], "tests/a.py::test_new"]
    durations = {"tests/a.py::test_short": 0.2, "tests/a.py::test_long": 90.0, gpu[0]: 40.0, gpu[1]: 1.0}
    units = longest_first(ids, durations)
    assert list(units) == ["tests/a.py::test_long", "tests/tlm/test_gpu.py", "tests/a.py::test_new",
                           "tests/a.py::test_short"]
    assert list(units["tests/tlm/test_gpu.py"]) == gpu  # whole, in file order
    assert sorted(n for u in units.values() for n in u) == sorted(ids)  # every test dealt once
    assert unit_of("tests/a.py::test_new") == "tests/a.py::test_new" and UNKNOWN_S > 0.2


def test_a_partial_run_refreshes_its_tests_and_keeps_the_others(tmp_path):
    path = tmp_path / "durations.json"
    assert load_durations(path) == {}
    store_durations({"t::a": 5.0, "t::b": 2.0, "t::tiny": 0.01}, path)
    store_durations({"t::a": 7.04}, path)
    assert load_durations(path) == {"t::a": 7.0, "t::b": 2.0}
