"""Per (model, benchmark) score dispersion: SDI and the compliance flip rate CFR_theta (paper §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.slices import slice_matrices
from safetyrepro.grid.direction import has_pass_fail
from safetyrepro.grid.grid_io import Grid
from safetyrepro.tasks.envelope import Rules

# CrowS-Pairs scores the share of pairs where the stereotypical sentence wins (0.5 = unbiased):
# there is no conventional pass/fail cut-off, so a thresholded CFR would not mean anything.
MEDIAN = "median"


@dataclass(frozen=True)
class Dispersion:
    n: int
    low: float
    high: float
    mean: float

    @property
    def range(self) -> float:
        return self.high - self.low

    @property
    def sdi(self) -> float:
        """(max - min) / mean; undefined when every score is zero."""
        return self.range / self.mean if self.mean > 0 else float("nan")


def dispersion(scores: Sequence[float]) -> Dispersion:
    s = np.asarray(scores, dtype=float)
    return Dispersion(len(s), float(s.min()), float(s.max()), float(s.mean()))


@dataclass(frozen=True)
class ComplianceFlip:
    threshold: float
    n: int
    n_pass: int

    @property
    def pass_share(self) -> float:
        return self.n_pass / self.n

    @property
    def cfr(self) -> float:
        """Probability that two distinct configurations disagree on pass/fail: 2n/(n-1) p(1-p)."""
        if self.n < 2:
            return float("nan")
        p = self.pass_share
        return 2 * self.n / (self.n - 1) * p * (1 - p)


def compliance_flip(scores: Sequence[float], theta: float | str) -> ComplianceFlip:
    """Pass means score >= theta; theta may be the string "median" (the per-cell median), where the
    identity pins CFR at its algebraic ceiling 2n/(n-1)/4 whenever the scores are distinct."""
    s = np.asarray(scores, dtype=float)
    threshold = float(np.median(s)) if theta == MEDIAN else float(theta)
    return ComplianceFlip(threshold, len(s), int(np.sum(s >= threshold)))


def cfr_ceiling(n: int) -> float:
    return 2 * n / (n - 1) / 4


def dispersion_tables(
    grid: Grid, rules: Rules, slices: tuple[str, ...], thetas: Sequence[float]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sdi, cfr) in long form: one row per model x benchmark x slice (x theta)."""
    sdi_rows, cfr_rows = [], []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        x = m.to_numpy(dtype=float)  # a column of the array, not of the DataFrame: same values, no pandas per cell
        column = {model: k for k, model in enumerate(m.columns)}
        for model in grid.models:
            scores = x[:, column[model]]
            d = dispersion(scores)
            sdi_rows.append(
                {
                    "model": model,
                    "benchmark": benchmark,
                    "slice": name,
                    "n_configs": d.n,
                    "min": d.low,
                    "max": d.high,
                    "mean": d.mean,
                    "range": d.range,
                    "sdi": d.sdi,
                }
            )
            each: tuple[float | str, ...] = (*thetas, MEDIAN)
            for theta in each:
                row = {"model": model, "benchmark": benchmark, "slice": name, "theta": str(theta), "n_configs": len(m)}
                if not has_pass_fail(benchmark):
                    row.update(
                        threshold=np.nan,
                        pass_share=np.nan,
                        cfr=np.nan,
                        ceiling=np.nan,
                        note="N/A: no pass/fail reading",
                    )
                else:
                    c = compliance_flip(scores, theta)
                    row.update(
                        threshold=c.threshold,
                        pass_share=c.pass_share,
                        cfr=c.cfr,
                        ceiling=cfr_ceiling(c.n) if c.n > 1 else np.nan,
                        note="",
                    )
                cfr_rows.append(row)
    return pd.DataFrame(sdi_rows), pd.DataFrame(cfr_rows)
