"""The rules' portfolio study: a subset is judged by the fastest of the rules and its variants."""
from __future__ import annotations

import pytest

from bench.studies.rule_portfolio import portfolio_speeds


def test_a_portfolio_is_worth_its_fastest_program_and_rows_without_the_reference_are_left_out():
    rows = [{"latency_s": {"ms_256": 1.0, "rules": 2.0, "roller": 1.0, "unroll16": 4.0}},
            {"latency_s": {"ms_256": 1.0, "rules": 1.0, "unroll512": 0.5}},
            {"latency_s": {"rules": 1.0}}]  # no reference: not judged
    assert portfolio_speeds(rows, "ms_256", 0) == [(pytest.approx(0.5 ** 0.5), ())]
    best = portfolio_speeds(rows, "ms_256", 2)
    assert best[0] == (pytest.approx(2.0 ** 0.5), ("unroll512", "roller"))  # 1.0x and 2.0x
    singles = dict((c, s) for s, c in portfolio_speeds(rows, "ms_256", 1))
    assert singles[("roller",)] == pytest.approx(1.0) and singles[("unroll16",)] == pytest.approx(0.5 ** 0.5)


def test_a_study_of_some_candidates_judges_subsets_of_those_alone():
    rows = [{"latency_s": {"ms_256": 1.0, "rules": 2.0, "roller": 1.0, "unroll16": 4.0}}]
    assert [c for _, c in portfolio_speeds(rows, "ms_256", 1, ["unroll16", "roller"])] == [("roller",), ("unroll16",)]
