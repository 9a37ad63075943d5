"""bench/studies/rankers.py's judging of a ranking on a measured pool: the best of the top-k by score."""
from __future__ import annotations

import numpy as np

from bench.studies.rankers import overruled, picks


def test_picks_take_the_best_speed_among_the_top_k_scores_failures_count_zero():
    scores = np.array([0.9, 0.1, 0.5, 0.7, 0.3])
    speeds = np.array([0.2, 1.0, 0.0, 0.6, 0.4])  # the fastest program is scored last but one
    assert picks(scores, speeds, ks=(1, 2, 3, 5)) == {"top1": 0.2, "top2": 0.6, "top3": 0.6, "top5": 1.0}


def test_ties_are_broken_by_pool_order():
    assert picks(np.zeros(3), np.array([0.3, 0.9, 0.1]), ks=(1,)) == {"top1": 0.3}


def test_the_value_head_learns_only_the_order_within_each_group():
    from bench.studies.value_head import demean, fit_ridge, spearman_in_groups

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3))
    groups = np.repeat(["a", "b", "c"], 20)
    # each group's level differs a lot (a heavy task and a light one); the order inside follows x[:, 0]
    y = 2.0 * x[:, 0] + np.repeat([10.0, -5.0, 0.0], 20)
    xc, yc = demean(x, groups), demean(y, groups)
    assert np.allclose([yc[groups == g].mean() for g in "abc"], 0)
    w = fit_ridge(xc, yc, 1e-6)
    assert np.allclose(w, [2.0, 0.0, 0.0], atol=1e-6)
    assert spearman_in_groups(x @ w, y, groups) > 0.99


def test_the_summary_is_a_geomean_over_tasks_and_a_failed_pick_counts_as_a_thousandth():
    from bench.studies.rankers import summarise

    rows = [{"fastest": 1.0, "rankers": {"cm": {"top1": 0.25, "top4": 1.0, "top10": 1.0}}},
            {"fastest": 1.0, "rankers": {"cm": {"top1": 0.0, "top4": 1.0, "top10": 1.0}}}]
    s = summarise(rows)
    assert np.isclose(s["cm"]["top1"], np.sqrt(0.25 * 1e-3)) and s["cm"]["top4"] == 1.0 and "spearman" not in s["cm"]
    assert s["fastest"] == {"top1": 1.0}


def test_the_rules_program_is_served_unless_another_is_predicted_faster_by_the_margin():
    """A served pool's pick may trust the cost model over the rules only past a margin: the rules'
    program first while no other program's score exceeds (1 + margin) x its own."""
    cost, is_rules = np.array([1.0, 1.25, 0.5]), np.array([True, False, False])
    assert int(np.argmax(overruled(cost, is_rules, 0.3))) == 0
    assert int(np.argmax(overruled(cost, is_rules, 0.2))) == 1
    assert list(overruled(cost, np.zeros(3, dtype=bool), 0.0)) == list(cost)  # no rules' program: as scored
