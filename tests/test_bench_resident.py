"""The resident plan's study: its three programs of a task, and which of them the rules take."""
from __future__ import annotations


def test_the_studys_sweep_is_the_rules_without_the_resident_plan_and_the_rules_take_one_of_the_two(monkeypatch):
    import collectors.blocking as blocking
    from bench.studies.resident import programs
    from tests.helpers.corpora import fixed_cpu
    from tests.helpers.workloads import make_task, matmul

    monkeypatch.setattr(blocking, "l2_bytes", lambda hw: 2 * 1024 * 1024)  # a Rocket Lake's L2, wherever it runs
    monkeypatch.setattr(blocking, "l2_ways", lambda hw: 16)
    hw = fixed_cpu("rocketlake")
    fits = blocking.resident_fits
    for (m, n, k), taken in (((128, 768, 768), True), ((128, 1024, 1024), False)):
        p = {name: str(s.trace) for name, s in programs(make_task(matmul(m, n, k), "dense", "matmul"), hw).items()}
        assert p["rules_sweep"] != p["rules_resident"], (m, n, k)
        assert p["rules_auto"] == (p["rules_resident"] if taken else p["rules_sweep"]), (m, n, k)
    assert blocking.resident_fits is fits  # the study's patch is undone
