"""Induced total orders of the models per configuration, how many of the M! orders a set of
configurations reaches, and the ranking concordance tau_R.

The contract orderings sort by raw score, highest first. Detail tables add the "better" reading
(best first under the benchmark's direction, see direction.py): for CrowS-Pairs, closest to 0.5
first, which is not the reverse of the score order."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import Rules

from .direction import direction
from .grid_io import Grid
from .slices import slice_matrices

ORDERINGS_COLUMNS = ("benchmark", "slice", "n_configs", "n_orderings")


def induced_ordering(scores: Mapping[str, float]) -> tuple[str, ...]:
    """Models from highest to lowest score; equal scores are broken alphabetically (the model whose
    name sorts first is placed higher), so every configuration yields one total order."""
    return tuple(sorted(scores, key=lambda m: (-scores[m], m)))


def ordering_label(order: tuple[str, ...]) -> str:
    return " > ".join(order)


def config_orderings(matrix: pd.DataFrame) -> pd.Series:
    """Induced ordering (as a label) of each row of a configs x models score table."""
    return pd.Series({cid: ordering_label(induced_ordering(row.to_dict())) for cid, row in matrix.iterrows()},
                     dtype=object)


@dataclass(frozen=True)
class OrderingsReached:
    n_configs: int
    n_models: int
    counts: tuple[tuple[str, int], ...]  # (ordering, configs that induce it), most frequent first

    @property
    def n_orderings(self) -> int:
        return len(self.counts)

    @property
    def n_possible(self) -> int:
        return math.factorial(self.n_models)


def orderings_reached(matrix: pd.DataFrame) -> OrderingsReached:
    counts = Counter(config_orderings(matrix))
    ranked = tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return OrderingsReached(len(matrix), matrix.shape[1], ranked)


@dataclass(frozen=True)
class Concordance:
    """tau_R: mean Kendall tau-b over every pair of configurations' model rankings."""

    tau_r: float
    n_config_pairs: int
    n_undefined: int          # pairs where one config ties every model (tau undefined), left out
    order_mismatch_rate: float  # share of config pairs whose tie-broken total orders differ (5/6 under a uniform null, M=3)


def ranking_concordance(matrix: pd.DataFrame) -> Concordance:
    """Kendall tau-b on the scores equals tau on average ranks, so ties are handled as average ranks.
    Computed from the pairwise sign vectors: tau_b(c, d) = <S_c, S_d> / sqrt(|S_c|_0 |S_d|_0)."""
    x = matrix.to_numpy(dtype=float)
    n_cfg, n_mod = x.shape
    iu, ju = np.triu_indices(n_mod, k=1)
    signs = np.sign(x[:, iu] - x[:, ju])  # configs x model pairs
    untied = np.count_nonzero(signs, axis=1).astype(float)
    dots = signs @ signs.T
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = dots / np.sqrt(np.outer(untied, untied))
    ci, cj = np.triu_indices(n_cfg, k=1)
    pair_tau = tau[ci, cj]
    defined = np.isfinite(pair_tau)
    orders = config_orderings(matrix).to_numpy()
    mismatch = float(np.mean(orders[ci] != orders[cj])) if len(ci) else float("nan")
    return Concordance(
        tau_r=float(pair_tau[defined].mean()) if defined.any() else float("nan"),
        n_config_pairs=len(ci), n_undefined=int((~defined).sum()), order_mismatch_rate=mismatch,
    )


def orderings_tables(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(orderings_detail, concordance), one row per benchmark x non-empty slice."""
    detail, concord = [], []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        reached = orderings_reached(m)
        better = direction(benchmark)
        reached_better = orderings_reached(better.better_value(m))
        detail.append({
            "benchmark": benchmark, "slice": name, "n_configs": reached.n_configs,
            "n_orderings": reached.n_orderings, "n_possible": reached.n_possible,
            "orderings": "; ".join(f"{o} ({n})" for o, n in reached.counts),
            # the same, best model first under the benchmark's direction (identical when higher is better)
            "better": better.label, "n_orderings_better": reached_better.n_orderings,
            "orderings_better": "; ".join(f"{o} ({n})" for o, n in reached_better.counts),
        })
        c = ranking_concordance(m)
        concord.append({
            "benchmark": benchmark, "slice": name, "n_configs": len(m), "tau_r": c.tau_r,
            "n_config_pairs": c.n_config_pairs, "n_undefined_pairs": c.n_undefined,
            "order_mismatch_rate": c.order_mismatch_rate,
        })
    return pd.DataFrame(detail), pd.DataFrame(concord)


def config_orderings_table(grid: Grid) -> pd.DataFrame:
    """The induced ordering of every configuration, with any tie that the alphabetical rule broke."""
    rows = []
    for benchmark in grid.benchmarks:
        m = grid.matrix(benchmark)
        labels = config_orderings(m)
        labels_better = config_orderings(direction(benchmark).better_value(m))
        for cid, row in m.iterrows():
            rows.append({"benchmark": benchmark, "config_id": cid, "ordering": labels[cid],
                         "tie_broken": bool(row.duplicated().any()), "ordering_better": labels_better[cid],
                         **{f"score_{model}": float(v) for model, v in row.items()}})
    return pd.DataFrame(rows)
