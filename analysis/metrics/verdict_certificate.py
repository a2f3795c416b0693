"""The verdict certificate (beyond the paper): for each benchmark, slice and pair, the configuration
that favours A most and the one that favours B most, with both scores and the config_id, so a
reader can re-run exactly those two cells and see the verdict move (or not). "Favours" reads the
benchmark's better direction (for CrowS-Pairs: closer to 0.5), `diff_better` the difference in it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.rank_flip import PAIR_BLOCK, pair_columns
from safetyrepro.analysis.metrics.slices import slice_matrices
from safetyrepro.grid.direction import direction
from safetyrepro.grid.grid_io import Grid, model_pairs
from safetyrepro.tasks.envelope import Rules

CERTIFICATE_COLUMNS = (
    "benchmark",
    "slice",
    "model_a",
    "model_b",
    "extreme",
    "config_id",
    "score_a",
    "score_b",
    "diff",
    "diff_better",
    "precision",
    "package",
)


def verdict_certificate(grid: Grid, rules: Rules, slices: tuple[str, ...]) -> pd.DataFrame:
    """Two rows per benchmark x slice x pair: extreme "max" (A most ahead in the better direction)
    and "min" (B most ahead). Among equal differences the first configuration in envelope order is named."""
    pairs = model_pairs(grid.models)
    parts = []
    for benchmark, name, m in slice_matrices(grid, rules, slices):
        x = m.to_numpy(dtype=float)
        bx = direction(benchmark).better_value(m).to_numpy(dtype=float)
        i, j = pair_columns(m.columns, pairs)
        ids = m.index.to_numpy()
        for start in range(0, len(pairs), PAIR_BLOCK):
            ii, jj = i[start : start + PAIR_BLOCK], j[start : start + PAIR_BLOCK]
            ahead = bx[:, ii] - bx[:, jj]  # configs x pairs; argmax/argmin name the first extreme, as idxmax does
            at = np.stack([ahead.argmax(axis=0), ahead.argmin(axis=0)], axis=1)  # pairs x (max, min)
            cols = np.stack([np.arange(len(ii))] * 2, axis=1)
            sa, sb = x[at, ii[:, None]], x[at, jj[:, None]]
            n = 2 * len(ii)
            block = pairs[start : start + PAIR_BLOCK]
            parts.append(
                {
                    "benchmark": [benchmark] * n,
                    "slice": [name] * n,
                    "model_a": [a for a, _ in block for _ in (0, 1)],
                    "model_b": [b for _, b in block for _ in (0, 1)],
                    "extreme": ["max", "min"] * len(ii),
                    "config_id": list(ids[at.ravel()]),
                    "score_a": sa.ravel(),
                    "score_b": sb.ravel(),
                    "diff": (sa - sb).ravel(),
                    "diff_better": ahead[at, cols].ravel(),
                    "precision": [grid.precision] * n,
                    "package": [grid.package] * n,
                }
            )
    if not parts:
        return pd.DataFrame([], columns=list(CERTIFICATE_COLUMNS))
    return pd.DataFrame(
        {
            c: [v for part in parts for v in part[c]]
            if isinstance(parts[0][c], list)
            else np.concatenate([part[c] for part in parts])
            for c in CERTIFICATE_COLUMNS
        },
        columns=list(CERTIFICATE_COLUMNS),
    )
