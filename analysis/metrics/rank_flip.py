"""rho_flip, the minority strict-sign mass of a model pair (paper eq. 1-2, Proposition 1).

Ties are decided on the score values exactly as given: a config counts for A only when A's score
is strictly greater (`>`), for B only when strictly smaller (`<`); every other config is a tie
(N0) and stays in the denominator, so ties pull rho_flip down.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.chance import chance_rho_flip, chance_rho_flip_max
from safetyrepro.analysis.metrics.slices import slice_matrices
from safetyrepro.grid.direction import direction
from safetyrepro.grid.grid_io import Grid, model_pairs
from safetyrepro.tasks.envelope import Rules

RHO_FLIP_COLUMNS = (
    "benchmark",
    "slice",
    "model_a",
    "model_b",
    "n_plus",
    "n_minus",
    "n_zero",
    "n_configs",
    "rho_flip",
    "ceiling",
)
# Detail: Proposition 1's flags, the chance reference at this |C|, and the "better" reading (the
# same counts when better is a monotone function of the score; for CrowS-Pairs, closer to 0.5).
RHO_FLIP_DETAIL_COLUMNS = (
    *RHO_FLIP_COLUMNS,
    "saturated",
    "d1",
    "d2",
    "chance",
    "better",
    "n_plus_better",
    "n_minus_better",
    "n_zero_better",
    "rho_flip_better",
)


@dataclass(frozen=True)
class PairCounts:
    """Strict sign counts of A - B over a set of configurations."""

    n_plus: int  # A strictly higher
    n_minus: int  # A strictly lower
    n_zero: int  # equal scores

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


PAIR_BLOCK = 1 << 14  # pairs compared at once (configs x block booleans), so memory stays flat in M


def pair_columns(columns, pairs: list[tuple[str, str]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(i, j): the column positions of model_a and model_b of every pair (`model_pairs` order by default)."""
    where = {m: k for k, m in enumerate(columns)}
    pairs = model_pairs(tuple(columns)) if pairs is None else pairs
    i = np.fromiter((where[a] for a, _ in pairs), dtype=np.intp, count=len(pairs))
    j = np.fromiter((where[b] for _, b in pairs), dtype=np.intp, count=len(pairs))
    return i, j


def sign_counts(x: np.ndarray, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`pair_counts` for every pair at once: (n_plus, n_minus, n_zero) arrays over the pairs (i, j) of
    the columns of a configs x models array, compared with the same strict `>` and `<`."""
    x = np.asarray(x, dtype=float)
    plus, minus = np.empty(len(i), dtype=np.int64), np.empty(len(i), dtype=np.int64)
    for start in range(0, len(i), PAIR_BLOCK):
        a, b = x[:, i[start : start + PAIR_BLOCK]], x[:, j[start : start + PAIR_BLOCK]]
        plus[start : start + PAIR_BLOCK] = np.count_nonzero(a > b, axis=0)
        minus[start : start + PAIR_BLOCK] = np.count_nonzero(a < b, axis=0)
    return plus, minus, len(x) - plus - minus


def rho_flip_table(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> pd.DataFrame:
    """One row per benchmark x slice x pair, detail columns included; empty slices have no rows."""
    pairs = model_pairs(grid.models)
    parts = []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        better = direction(benchmark)
        mb = better.better_value(m)
        i, j = pair_columns(m.columns, pairs)
        plus, minus, zero = sign_counts(m.to_numpy(dtype=float), i, j)
        plus_b, minus_b, zero_b = sign_counts(mb.to_numpy(dtype=float), i, j)
        n = len(m)
        minority = np.minimum(plus, minus)
        parts.append(
            {
                "benchmark": [benchmark] * len(pairs),
                "slice": [name] * len(pairs),
                "model_a": [a for a, _ in pairs],
                "model_b": [b for _, b in pairs],
                "n_plus": plus,
                "n_minus": minus,
                "n_zero": zero,
                "n_configs": np.full(len(pairs), n, dtype=np.int64),
                "rho_flip": minority / n,
                "ceiling": np.full(len(pairs), (n // 2) / n),
                "saturated": (minority == n // 2) & (n >= 2),
                "d1": (plus == 0) | (minus == 0),
                "d2": ((plus > 0).astype(int) + (minus > 0) + (zero > 0)) == 1,
                "chance": np.full(len(pairs), chance_rho_flip(n)),
                "better": [better.label] * len(pairs),
                "n_plus_better": plus_b,
                "n_minus_better": minus_b,
                "n_zero_better": zero_b,
                "rho_flip_better": np.minimum(plus_b, minus_b) / n,
            }
        )
    if not parts:
        return pd.DataFrame([], columns=list(RHO_FLIP_DETAIL_COLUMNS))
    columns = {
        c: [v for part in parts for v in part[c]]
        if isinstance(parts[0][c], list)
        else np.concatenate([part[c] for part in parts])
        for c in RHO_FLIP_DETAIL_COLUMNS
    }
    return pd.DataFrame(columns, columns=list(RHO_FLIP_DETAIL_COLUMNS))


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
        rows.append(
            {
                "benchmark": benchmark,
                "slice": name,
                "n_configs": int(g["n_configs"].iloc[0]),
                "rho_flip_max": float(top),
                "pairs": _pairs_at(g, "rho_flip"),
                "ceiling": float(g["ceiling"].iloc[0]),
                "saturated": bool(at["saturated"].any()),
                "n_pairs_with_reversal": int((g["rho_flip"] > 0).sum()),
                "n_pairs": len(g),
                "chance_max": chance_rho_flip_max(n, models),
                "better": g["better"].iloc[0],
                "rho_flip_max_better": float(g["rho_flip_better"].max()),
                "pairs_better": _pairs_at(g, "rho_flip_better"),
            }
        )
    return pd.DataFrame(rows)
