"""Two runs of any task, paired item by item (`safetyrepro verdict A B` on tasks SafetyRepro does not define):
per task x metric the paired difference A - B, the exact paired test, Holm across every comparison made, an
interval for the difference that inverts that test at the row's Holm level (sign_flip.paired_interval,
holm_levels: exact Clopper-Pearson on the discordant items for 0/1 scores, the inverted sign-flip test
otherwise; it excludes 0 only on a confirmed row and never has zero width where the test says nothing), the
difference the items could detect, and, with a margin, the equivalence test.

The unit is the item: a task's scores are each item's mean over the epochs both runs scored, so items, not
epochs, are the draws (epochs of one item are not independent). The tests are the analysis's own:
- the exact paired sign-flip test (significance.sign_flip_p_value): McNemar's exact test for 0/1 scores, the
  exact permutation law of the signed differences for scores on a lattice (epoch means, partial credit);
- Holm over the K comparisons (significance.holm): a claim counts at p_holm <= alpha;
- the smallest true difference found at 80 % power at Holm's first step, alpha / K, under that test, from the
  items' own differences (power.detectable_from_differences);
- with a margin M, TOST (tost.py), its p-values Holm-adjusted over the same K.
The claims are about the models (population: items as draws from the task, epochs from the decoder), as
`analyze`'s item tests are. Where items come in clusters (`--cluster FIELD`: a passage, a template, a
conversation), the clusters are the draws instead: the test, the interval and the detectable difference are
clustered.py's, on the clusters' totals; n_clusters says how many.
Which model is better reads the metric's direction where the run records one
(lm-eval's higher_is_better) or the user gave one; otherwise the table says which is higher, not better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.analysis.paired.clustered import cluster_interval, cluster_means, cluster_p_value
from safetyrepro.analysis.paired.power import detectable_from_differences
from safetyrepro.analysis.paired.sign_flip import holm_levels, paired_interval
from safetyrepro.analysis.paired.significance import exact_mean, holm, sign_flip_p_value
from safetyrepro.analysis.paired.tost import is_binary, tost

TARGET_POWER = 0.8
MCNEMAR = "exact McNemar (0/1 scores)"
SIGN_FLIP = "exact sign-flip permutation (bounded scores)"
CLUSTERED = "exact sign-flip permutation of cluster totals"
COLUMNS = (
    "task",
    "metric",
    "direction",
    "n_items",
    "n_epochs",
    "n_clusters",
    "mean_a",
    "mean_b",
    "diff",
    "ci_low",
    "ci_high",
    "ci_level",
    "ci_method",
    "n_differing",
    "test",
    "p_value",
    "p_holm",
    "winner",
    "detectable",
    "detectable_basis",
    "margin",
    "p_tost_lower",
    "p_tost_upper",
    "p_tost",
    "p_tost_holm",
    "equivalent",
    "tost_test",
)


@dataclass(frozen=True)
class PairedScores:
    """One task x metric, paired: each item's score in A's and B's run (epoch means), items in id order."""

    task: str
    metric: str
    a: np.ndarray
    b: np.ndarray
    higher_is_better: bool | None  # None: the direction is not known
    n_epochs: int = 1
    clusters: tuple[str, ...] | None = None  # each item's cluster (--cluster): the clusters are the draws
    cluster_field: str = ""  # what the clusters are (the field they were read from)


@dataclass(frozen=True)
class TwoRunVerdict:
    label_a: str
    label_b: str
    alpha: float
    margin: float | None
    table: pd.DataFrame  # one row per task x metric (COLUMNS)
    family_size: int  # K: the comparisons Holm covers
    cluster: str = ""  # the field that named the items' clusters (--cluster), "" for items as the draws


def direction_name(higher_is_better: bool | None) -> str:
    return {True: "higher is better", False: "lower is better", None: "not recorded"}[higher_is_better]


def compare(
    pairs: Sequence[PairedScores], label_a: str, label_b: str, alpha: float = 0.05, margin: float | None = None
) -> TwoRunVerdict:
    """The verdict of every comparison in `pairs`, Holm over all of them."""
    rows = []
    k = len(pairs)
    for p in pairs:
        d = np.asarray(p.a, dtype=float) - np.asarray(p.b, dtype=float)
        if p.clusters is not None and margin is not None:
            raise ValueError("the equivalence test is not clustered: no margin with clusters")
        unit = d if p.clusters is None else cluster_means(d, p.clusters)  # the draws the test reads
        found = detectable_from_differences(unit, k, alpha, TARGET_POWER) if len(d) else None
        row = {
            "task": p.task,
            "metric": p.metric,
            "direction": direction_name(p.higher_is_better),
            "n_items": len(d),
            "n_epochs": p.n_epochs,
            "n_clusters": None if p.clusters is None else len(set(p.clusters)),
            "mean_a": exact_mean(np.asarray(p.a, dtype=float)),
            "mean_b": exact_mean(np.asarray(p.b, dtype=float)),
            "diff": exact_mean(d),
            "n_differing": int(np.count_nonzero(d)),
            "test": _test_name(p, d),
            "p_value": sign_flip_p_value(d) if p.clusters is None else cluster_p_value(d, p.clusters),
            "detectable": None if found is None else found.effect,
            # the design it is read at (issue 53)
            "detectable_basis": "" if found is None else _basis(found.basis, p),
            "margin": margin,
        }
        if margin is not None:
            t = tost(d, margin, alpha)
            row.update(p_tost_lower=t.p_lower, p_tost_upper=t.p_upper, p_tost=t.p_value, tost_test=t.test)
        rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    if k:
        p_values = table["p_value"].to_numpy(dtype=float)
        _, adjusted = holm(p_values, alpha)
        reject, levels = holm_levels(p_values, alpha)
        intervals = [_interval(q, level, bool(r)) for q, level, r in zip(pairs, levels, reject, strict=True)]
        table["ci_low"] = [i.low for i in intervals]
        table["ci_high"] = [i.high for i in intervals]
        table["ci_level"] = [i.confidence for i in intervals]
        table["ci_method"] = [i.method for i in intervals]
        table["p_holm"] = adjusted
        table["winner"] = [
            _winner(r, row, label_a, label_b, p) for r, (_, row), p in zip(reject, table.iterrows(), pairs)
        ]
        if margin is not None:
            same, adjusted = holm(table["p_tost"].to_numpy(dtype=float), alpha)
            table["p_tost_holm"] = adjusted
            table["equivalent"] = same
    cluster = next((p.cluster_field or "the given field" for p in pairs if p.clusters is not None), "")
    return TwoRunVerdict(label_a, label_b, alpha, margin, table, k, cluster)


def _test_name(p: PairedScores, d: np.ndarray) -> str:
    if p.clusters is None:
        return MCNEMAR if is_binary(d) else SIGN_FLIP
    return f"{CLUSTERED} ({len(set(p.clusters))} clusters of {p.cluster_field or 'the given field'})"


def _basis(basis: str, p: PairedScores) -> str:
    return basis if p.clusters is None else f"{basis}, on the {len(set(p.clusters))} clusters' mean differences"


def _interval(p: PairedScores, level: float, rejected: bool):
    d = np.asarray(p.a, dtype=float) - np.asarray(p.b, dtype=float)
    if p.clusters is None:
        return paired_interval(d, level, rejected)
    return cluster_interval(d, p.clusters, level, rejected)


def _winner(reject: bool, row, a: str, b: str, p: PairedScores) -> str:
    """Who the confirmed difference favours ("" when not confirmed): the better model where the direction is
    known, else the higher-scoring one (`higher: A`)."""
    if not reject or row["diff"] == 0:
        return ""
    higher = a if row["diff"] > 0 else b
    if p.higher_is_better is None:
        return f"higher: {higher}"
    return higher if p.higher_is_better else (b if higher == a else a)
