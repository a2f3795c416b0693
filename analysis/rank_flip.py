"""rho_flip, the minority strict-sign mass of a model pair (paper eq. 1-2, Proposition 1).

Ties are decided on the score values exactly as given: a config counts for A only when A's score
is strictly greater (`>`), for B only when strictly smaller (`<`); every other config is a tie
(N0) and stays in the denominator, so ties pull rho_flip down.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import Rules

from .chance import chance_rho_flip, chance_rho_flip_max
from .direction import direction
from .grid_io import Grid
from .slices import slice_matrices

RHO_FLIP_COLUMNS = ("benchmark", "slice", "model_a", "model_b", "n_plus", "n_minus", "n_zero",
                    "n_configs", "rho_flip", "ceiling")
# Detail: Proposition 1's flags, the chance reference at this |C|, and the "better" reading (the
# same counts when better is a monotone function of the score; for CrowS-Pairs, closer to 0.5).
RHO_FLIP_DETAIL_COLUMNS = (*RHO_FLIP_COLUMNS, "saturated", "d1", "d2", "chance", "better", "n_plus_better",
                           "n_minus_better", "n_zero_better", "rho_flip_better")


@dataclass(frozen=True)
class PairCounts:
    """Strict sign counts of A - B over a set of configurations."""

    n_plus: int   # A strictly higher
    n_minus: int  # A strictly lower
    n_zero: int   # equal scores

    @property
    def n_configs(self) -> int:
        return self.n_plus + self.n_minus + self.n_zero

    @property
    def rho_flip(self) -> float:
        return min(self.n_plus, self.n_minus) / self.n_configs

    @property
    def ceiling(self) -> float:
        """The largest value rho_flip can take at this |C| (Prop. 1 (iii))."""
        return (self.n_configs // 2) / self.n_configs

    @property
    def saturated(self) -> bool:
        # A saturated value proves a reversal exists but says nothing about its size.
        return self.n_configs >= 2 and min(self.n_plus, self.n_minus) == self.n_configs // 2

    @property
    def d1(self) -> bool:
        """(D1) no strict reversal: one side never wins strictly. Holds iff rho_flip == 0."""
        return self.n_plus == 0 or self.n_minus == 0

    @property
    def d2(self) -> bool:
        """(D2) a single sign verdict: exactly one of N+, N-, N0 is non-zero. Implies D1."""
        return sum(n > 0 for n in (self.n_plus, self.n_minus, self.n_zero)) == 1


def pair_counts(a: np.ndarray, b: np.ndarray) -> PairCounts:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    plus, minus = int(np.sum(a > b)), int(np.sum(a < b))
    return PairCounts(plus, minus, len(a) - plus - minus)


def model_pairs(models: tuple[str, ...]) -> list[tuple[str, str]]:
    """Unordered pairs with model_a < model_b alphabetically (the contract's orientation)."""
    return list(itertools.combinations(sorted(models), 2))


def rho_flip_table(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> pd.DataFrame:
    """One row per benchmark x slice x pair, detail columns included; empty slices have no rows."""
    rows = []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        better = direction(benchmark)
        mb = better.better_value(m)
        for a, b in model_pairs(grid.models):
            c = pair_counts(m[a].to_numpy(), m[b].to_numpy())
            cb = pair_counts(mb[a].to_numpy(), mb[b].to_numpy())
            rows.append((benchmark, name, a, b, c.n_plus, c.n_minus, c.n_zero, c.n_configs,
                         c.rho_flip, c.ceiling, c.saturated, c.d1, c.d2, chance_rho_flip(c.n_configs), better.label,
                         cb.n_plus, cb.n_minus, cb.n_zero, cb.rho_flip))
    return pd.DataFrame(rows, columns=list(RHO_FLIP_DETAIL_COLUMNS))


NO_REVERSAL = "none (no pair reverses)"


def _pairs_at(g: pd.DataFrame, column: str) -> str:
    """Every pair attaining the maximum of `column`; none when the maximum is 0 (no pair reverses)."""
    top = g[column].max()
    if top == 0:
        return NO_REVERSAL
    at = g[g[column] == top]
    return "; ".join(f"{a} vs {b}" for a, b in zip(at["model_a"], at["model_b"], strict=True))


def rho_flip_max(detail: pd.DataFrame, n_models: int | None = None) -> pd.DataFrame:
    """The per benchmark x slice maximum over pairs, with every pair that attains it, the chance
    reference of that maximum, and the same maximum on the "better" reading."""
    rows = []
    for (benchmark, name), g in detail.groupby(["benchmark", "slice"], sort=False):
        top = g["rho_flip"].max()
        at = g[g["rho_flip"] == top]
        n = int(g["n_configs"].iloc[0])
        models = n_models or len(set(g["model_a"]) | set(g["model_b"]))
        rows.append({
            "benchmark": benchmark, "slice": name, "n_configs": int(g["n_configs"].iloc[0]),
            "rho_flip_max": float(top), "pairs": _pairs_at(g, "rho_flip"),
            "ceiling": float(g["ceiling"].iloc[0]), "saturated": bool(at["saturated"].any()),
            "n_pairs_with_reversal": int((g["rho_flip"] > 0).sum()), "n_pairs": len(g),
            "chance_max": chance_rho_flip_max(n, models), "better": g["better"].iloc[0],
            "rho_flip_max_better": float(g["rho_flip_better"].max()), "pairs_better": _pairs_at(g, "rho_flip_better"),
        })
    return pd.DataFrame(rows)
