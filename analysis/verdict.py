"""The verdict certificate (beyond the paper): for each benchmark, slice and pair, the configuration
that favours A most and the one that favours B most, with both scores and the config_id, so a
reader can re-run exactly those two cells and see the verdict move (or not). "Favours" reads the
benchmark's better direction (for CrowS-Pairs: closer to 0.5), `diff_better` the difference in it."""

from __future__ import annotations

import pandas as pd

from safetyrepro.tasks.envelope import Rules

from .direction import direction
from .grid_io import Grid
from .rank_flip import model_pairs
from .slices import slice_matrices

CERTIFICATE_COLUMNS = ("benchmark", "slice", "model_a", "model_b", "extreme", "config_id", "score_a",
                       "score_b", "diff", "diff_better", "precision", "package")


def verdict_certificate(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> pd.DataFrame:
    """Two rows per benchmark x slice x pair: extreme "max" (A most ahead in the better direction)
    and "min" (B most ahead). Among equal differences the first configuration in envelope order is named."""
    rows = []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        better = direction(benchmark).better_value(m)
        for a, b in model_pairs(grid.models):
            diff, ahead = m[a] - m[b], better[a] - better[b]
            for extreme, cid in (("max", ahead.idxmax()), ("min", ahead.idxmin())):
                rows.append((benchmark, name, a, b, extreme, cid, float(m.at[cid, a]), float(m.at[cid, b]),
                             float(diff[cid]), float(ahead[cid]), grid.precision, grid.package))
    return pd.DataFrame(rows, columns=list(CERTIFICATE_COLUMNS))
