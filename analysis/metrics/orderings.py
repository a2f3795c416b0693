"""Induced orders of the models per configuration, how many of the M! orders a set of
configurations reaches, and the ranking concordance tau_R.

Ties are never broken: a configuration where models score the same induces a weak order, written
with "=" ("a = b > c"), counted and listed as such. The paper's count, "orderings reached" out of
M!, is of strict orders: `n_orderings` counts the distinct strict orders among the configurations
with no tie; `n_weak_orderings` counts every distinct order, tied ones included, and
`n_tied_configs` how many configurations tie some models (they reach no strict order).

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

from safetyrepro.analysis.metrics.slices import slice_matrices
from safetyrepro.grid.direction import direction
from safetyrepro.grid.grid_io import Grid
from safetyrepro.tasks.envelope import Rules

ORDERINGS_COLUMNS = ("benchmark", "slice", "n_configs", "n_orderings")


def induced_ordering(scores: Mapping[str, float]) -> tuple[tuple[str, ...], ...]:
    """The weak order of the models: groups of equal score from highest to lowest (names sorted
    within a group, which says nothing about order: they tie)."""
    groups: dict[float, list[str]] = {}
    for m in sorted(scores):
        groups.setdefault(float(scores[m]), []).append(m)
    return tuple(tuple(groups[v]) for v in sorted(groups, reverse=True))


def ordering_label(order: tuple[tuple[str, ...], ...]) -> str:
    return " > ".join(" = ".join(g) for g in order)


def is_strict(label: str) -> bool:
    return " = " not in label


def config_orderings(matrix: pd.DataFrame) -> pd.Series:
    """Induced ordering (as a label) of each row of a configs x models score table."""
    return pd.Series(
        {cid: ordering_label(induced_ordering(row.to_dict())) for cid, row in matrix.iterrows()}, dtype=object
    )


@dataclass(frozen=True)
class OrderingsReached:
    n_configs: int
    n_models: int
    counts: tuple[tuple[str, int], ...]  # (ordering, configs that induce it), most frequent first; ties as "="

    @property
    def n_orderings(self) -> int:
        """Distinct strict orders reached (configurations that tie some models reach none)."""
        return sum(1 for o, _ in self.counts if is_strict(o))

    @property
    def n_weak_orderings(self) -> int:
        return len(self.counts)

    @property
    def n_tied_configs(self) -> int:
        return sum(n for o, n in self.counts if not is_strict(o))

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
    n_undefined: int  # pairs where one config ties every model (tau undefined), left out
    order_mismatch_rate: float  # share of config pairs whose (weak) orders differ (5/6 under a uniform null, M=3)


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
        n_config_pairs=len(ci),
        n_undefined=int((~defined).sum()),
        order_mismatch_rate=mismatch,
    )


def orderings_tables(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(orderings_detail, concordance), one row per benchmark x non-empty slice."""
    detail, concord = [], []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        reached = orderings_reached(m)
        better = direction(benchmark)
        reached_better = orderings_reached(better.better_value(m))
        detail.append(
            {
                "benchmark": benchmark,
                "slice": name,
                "n_configs": reached.n_configs,
                "n_orderings": reached.n_orderings,
                "n_possible": reached.n_possible,
                "n_weak_orderings": reached.n_weak_orderings,
                "n_tied_configs": reached.n_tied_configs,
                "orderings": "; ".join(f"{o} ({n})" for o, n in reached.counts),
                # the same, best model first under the benchmark's direction (identical when higher is better)
                "better": better.label,
                "n_orderings_better": reached_better.n_orderings,
                "n_tied_configs_better": reached_better.n_tied_configs,
                "orderings_better": "; ".join(f"{o} ({n})" for o, n in reached_better.counts),
            }
        )
        c = ranking_concordance(m)
        concord.append(
            {
                "benchmark": benchmark,
                "slice": name,
                "n_configs": len(m),
                "tau_r": c.tau_r,
                "n_config_pairs": c.n_config_pairs,
                "n_undefined_pairs": c.n_undefined,
                "order_mismatch_rate": c.order_mismatch_rate,
            }
        )
    return pd.DataFrame(detail), pd.DataFrame(concord)


def config_orderings_table(grid: Grid) -> pd.DataFrame:
    """The induced (weak) ordering of every configuration, and whether some models tie in it."""
    rows = []
    for benchmark in grid.benchmarks:
        m = grid.matrix(benchmark)
        labels = config_orderings(m)
        labels_better = config_orderings(direction(benchmark).better_value(m))
        for cid, row in m.iterrows():
            rows.append(
                {
                    "benchmark": benchmark,
                    "config_id": cid,
                    "ordering": labels[cid],
                    "tied": bool(row.duplicated().any()),
                    "ordering_better": labels_better[cid],
                    **{f"score_{model}": float(v) for model, v in row.items()},
                }
            )
    return pd.DataFrame(rows)
