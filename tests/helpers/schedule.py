"""How the suite's tests are dealt to its two xdist workers: longest first, by recorded durations.

On 2 cores the suite's wall time is its worker time over two only when both workers stay busy
to the end. xdist's own ``load`` hands each worker a quarter of the collection up front in
collection order, so one worker got every heavy test and ran alone for the last ten minutes
(1,574 s of wall for 2,069 s of tests). :class:`LongestFirst` is xdist's ``loadscope`` with two
changes: a unit of work is one test unless its file shares a costly fixture
(:data:`SHARED_FIXTURES`: those files go whole to one worker, so the cost is paid once a run),
and units are dealt longest first by the durations a full run recorded (``durations.json``
beside the tests; a test not in it counts :data:`UNKNOWN_S`). Refresh the record with
``pytest --store-durations`` after adding or changing a heavy test.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

#: The recorded durations: ``{nodeid: seconds of setup, call and teardown}``.
DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
#: What a test missing from the record is taken to cost (most tests take well under a second).
UNKNOWN_S = 1.0
#: Files whose tests share a fixture too costly to pay on both workers: each goes whole to one.
SHARED_FIXTURES = {
    "tests/tlm/test_gpu.py": "the CUDA tensor intrinsics import (~15-25 s a process on 2 cores with shallow stacks)",
    "tests/cluster/test_collect_job.py": "the simulated Ray cluster (started once for a file's run, ~15 s)",
    "tests/cluster/test_node_job.py": "the simulated Ray cluster (started once for a file's run, ~15 s)",
    "tests/cluster/test_serve.py": "one Ray Serve application a module",
    "tests/collectors/test_tuner.py": "one MetaSchedule tuning run a module (~20 s)",
}


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded durations; empty when there is no record (every test then counts the same)."""
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


def store_durations(seconds: dict[str, float], path: Path = DURATIONS) -> None:
    """Record a run's durations over the earlier record. Tests under 0.1 s are left out to keep
    the record short (they then count :data:`UNKNOWN_S`: only their place in the deal changes)."""
    merged = {**load_durations(path), **seconds}  # a partial run refreshes its own tests
    kept = {k: round(v, 1) for k, v in sorted(merged.items()) if v >= 0.1}
    path.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file when that file shares a costly fixture."""
    path = nodeid.split("::", 1)[0]
    return path if path in SHARED_FIXTURES else nodeid


def longest_first(nodeids: list[str], durations: dict[str, float]) -> "OrderedDict[str, dict[str, bool]]":
    """The units of work, longest first (a file's tests keep their order inside its unit)."""
    units: dict[str, dict[str, bool]] = {}
    for nodeid in nodeids:
        units.setdefault(unit_of(nodeid), {})[nodeid] = False

    def cost(unit: str) -> float:
        return sum(durations.get(n, UNKNOWN_S) for n in units[unit])

    return OrderedDict((u, units[u]) for u in sorted(units, key=cost, reverse=True))


class LongestFirst(LoadScopeScheduling):
    """xdist's ``loadscope`` dealing :func:`longest_first` units; a crashed test is not dealt again."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def schedule(self) -> None:
        if self.collection is None and self._check_nodes_have_same_collection():
            self.collection = list(next(iter(self.registered_collections.values())))
            self.workqueue.update(longest_first(self.collection, load_durations()))
            super().schedule()  # with the collection known: one unit to each worker
            # a worker runs a test only once it holds the next one (xdist's nextitem): a second unit each
            for node in self.nodes:
                self._reschedule(node)
            return
        super().schedule()

    def remove_node(self, node) -> str | None:
        """A worker that died hands its unfinished tests back, less the one it died in (reported
        as crashed, as xdist's ``load`` does): loadscope would deal that one again, to die again."""
        workload = self.assigned_work.pop(node)
        pending = [n for unit in workload.values() for n, done in unit.items() if not done]
        if not pending:
            return None
        crashed = pending[0]
        for unit in workload.values():
            unit.pop(crashed, None)
        self.workqueue.update({scope: unit for scope, unit in workload.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed
