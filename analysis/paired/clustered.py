"""Paired tests and intervals when items come in clusters (issue 57: passages, templates, conversations).

Items of one cluster share what the cluster brings (a passage both models read, a template both fill), so their
paired differences are not independent: a test that treats them as independent reads a cluster-wide shift as
many independent agreements, and its false claims exceed alpha (tests/analysis/test_clustered_57.py measures
it). The clusters, not the items, are then the independent draws.

The test: the exact sign-flip test on the clusters' totals T_c = sum of the paired differences of cluster c's
items. Under the null that the two models are exchangeable on each cluster as a whole (swapping A and B on
every item of a cluster leaves the law unchanged), each T_c is as likely to be +|T_c| as -|T_c|, whatever the
dependence within the cluster; the statistic is the total sum(T_c), that is n times the mean item difference,
so the test is about the same quantity as the unclustered one, with the clusters as its unit. One item per
cluster is the unclustered test.

The interval inverts that test for a common shift of every item, delta: {delta : the test on T_c - n_c delta is
not rejected} (n_c the cluster's size), found by bisection, each p-value exact up to EXACT_INTERVAL_CLUSTERS
clusters and from the law's normal approximation beyond; the row's own decision places 0, so the interval
excludes 0 exactly where the row is confirmed. What the items could detect is read on the clusters' mean
differences (power.detectable_from_differences), exact for clusters of one size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import norm

from safetyrepro.analysis.paired.sign_flip import BISECTION_STEP, Interval, bisect_boundary, sign_flip_p_value

EXACT_INTERVAL_CLUSTERS = 100  # above: each bisection step reads the normal approximation of the sign-flip law
CLUSTER_INTERVAL = "the clustered sign-flip test inverted (exact up to 100 clusters, normal beyond)"


def cluster_totals(differences, clusters: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(each cluster's total paired difference, its number of items), clusters in first-seen order."""
    d = np.asarray(differences, dtype=float)
    labels = [str(c) for c in clusters]
    if len(labels) != len(d):
        raise ValueError(f"{len(labels)} cluster labels for {len(d)} differences")
    by = pd.Series(d).groupby(labels, sort=False)
    return by.sum().to_numpy(dtype=float), by.size().to_numpy(dtype=float)


def cluster_p_value(differences, clusters: Sequence) -> float:
    """Two-sided exact p-value of the mean paired difference with the clusters as the sampling unit."""
    totals, _ = cluster_totals(differences, clusters)
    return sign_flip_p_value(totals)


def _p_shifted(totals: np.ndarray, sizes: np.ndarray, delta: float) -> float:
    shifted = totals - sizes * delta
    if len(totals) <= EXACT_INTERVAL_CLUSTERS:
        return sign_flip_p_value(shifted)
    spread = float(np.sqrt(np.sum(shifted**2)))
    if spread == 0:
        return 1.0
    return float(min(1.0, 2 * norm.sf(abs(float(shifted.sum())) / spread)))


def _end(totals, sizes, alpha: float, start: float, limit: float) -> float:
    """The first shift from `start` towards `limit` that the test rejects (`limit` where none is)."""
    if _p_shifted(totals, sizes, limit) > alpha:
        return limit
    return bisect_boundary(lambda delta: _p_shifted(totals, sizes, delta) <= alpha, start, limit)


def cluster_interval(differences, clusters: Sequence, alpha: float, rejected: bool | None = None) -> Interval:
    """The interval beside cluster_p_value at level 1 - alpha (the row's own, Holm's: sign_flip.holm_levels).
    `rejected`: the row's decision, by default p <= alpha. It contains 0 exactly where the decision is "not
    rejected", and is never of zero width (a shift of every item moves every total unless all are 0, and a
    test on one or two clusters rejects nothing: such an interval is [-1, 1])."""
    d = np.asarray(differences, dtype=float)
    if len(d) == 0:
        return Interval(float("nan"), float("nan"), alpha, "")
    totals, sizes = cluster_totals(d, clusters)
    mean = float(totals.sum() / sizes.sum())
    if rejected is None:
        rejected = sign_flip_p_value(totals) <= alpha
    # where the row's decision puts 0 outside, the end on 0's side lies between the mean and 0
    high = _end(totals, sizes, alpha, mean, 0.0) if rejected and mean < 0 else _end(totals, sizes, alpha, mean, 1.0)
    low = _end(totals, sizes, alpha, mean, 0.0) if rejected and mean > 0 else _end(totals, sizes, alpha, mean, -1.0)
    if rejected and mean < 0 and high >= 0:  # the bisection's rejected end is 0 only if no shift was accepted
        high = min(high, mean + BISECTION_STEP / 2)
    if rejected and mean > 0 and low <= 0:
        low = max(low, mean - BISECTION_STEP / 2)
    if not rejected:
        low, high = min(low, 0.0), max(high, 0.0)
    return Interval(float(low), float(high), alpha, CLUSTER_INTERVAL)


def cluster_means(differences, clusters: Sequence) -> np.ndarray:
    """Each cluster's mean paired difference: what the detectable difference is read on."""
    totals, sizes = cluster_totals(differences, clusters)
    return totals / sizes
