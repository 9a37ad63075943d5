"""bench/rankers.py's judging of a ranking on a measured pool: the best of the top-k by score."""
from __future__ import annotations

import numpy as np

from bench.rankers import picks


def test_picks_take_the_best_speed_among_the_top_k_scores_failures_count_zero():
    scores = np.array([0.9, 0.1, 0.5, 0.7, 0.3])
    speeds = np.array([0.2, 1.0, 0.0, 0.6, 0.4])  # the fastest program is scored last but one
    assert picks(scores, speeds, ks=(1, 2, 3, 5)) == {"top1": 0.2, "top2": 0.6, "top3": 0.6, "top5": 1.0}


def test_ties_are_broken_by_pool_order():
    assert picks(np.zeros(3), np.array([0.3, 0.9, 0.1]), ks=(1,)) == {"top1": 0.3}
