"""What a grid's items can detect (beyond the paper): per benchmark x slice x pair, the smallest true
paired difference of one configuration that its items find at 80 % power under the Holm family the claims use,
and the power at a 10-point difference. A verdict of "no significant flip" reads differently at 24 items,
where almost nothing is detectable, than at 700.

The power is the test actually run on the configuration's items (power.detectable_from_differences): the exact
sign-flip test on the seed means' own lattice (a 5-seed difference of 0.4 weighs 0.4; the 0/1 model read at
mean |d| overstated the detectable difference about 1.6 times, issue 53), the exact McNemar test at the design
discordance for 0/1 scores. It is read on the slice's median configuration (by mean |d|): one exact
computation per row, not one per configuration."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.slices import slice_config_ids
from safetyrepro.analysis.paired.power import detectable_from_differences, effective_discordance, power_from_differences
from safetyrepro.analysis.paired.significance import ItemRecords
from safetyrepro.grid.grid_io import Grid, model_pairs
from safetyrepro.tasks.envelope import Rules

TARGET_POWER = 0.8
REFERENCE_EFFECT = 0.10  # the difference whose power is reported beside the detectable one
DETECTABLE_COLUMNS = (
    "benchmark",
    "slice",
    "model_a",
    "model_b",
    "n_items",
    "n_configs",
    "discordance",
    "detectable_difference",
    "power_at_reference",
    "reference_effect",
    "target_power",
    "alpha",
)


def detectable_table(
    items: ItemRecords,
    grid: Grid,
    rules: Rules,
    slices: Sequence[str],
    alpha: float,
    target: float = TARGET_POWER,
    reference: float = REFERENCE_EFFECT,
) -> pd.DataFrame:
    """One row per benchmark x slice x pair with item records: n_items (the fewest paired items of
    the slice's configurations), n_configs (K, the Holm family), discordance (the mean over the
    configurations of power.effective_discordance), and, on the median configuration by that mean |d|, the
    detectable difference under the test run on it (NaN when even the largest difference its design allows
    falls short) and the power at `reference` (0 where that design allows no difference that large)."""
    rows = []
    col = {m: items.column(m) for m in grid.models}
    for benchmark in grid.benchmarks:
        for name in slices:
            ids = [
                c
                for c in slice_config_ids(grid, rules, benchmark, name)
                if c in items.by_config and len(items.by_config[c])
            ]
            if not ids:
                continue
            n = min(len(items.by_config[c]) for c in ids)
            for a, b in model_pairs(grid.models):
                diffs = {c: items.by_config[c][:, col[a]] - items.by_config[c][:, col[b]] for c in ids}
                spread = {c: effective_discordance(x) for c, x in diffs.items()}
                d = float(np.mean(list(spread.values())))
                typical = diffs[_median_key(spread)]
                found = detectable_from_differences(typical, len(ids), alpha, target).effect
                at_reference = power_from_differences(typical, reference, len(ids), alpha)
                found_value = np.nan if found is None else found
                rows.append(
                    (benchmark, name, a, b, n, len(ids), d, found_value, at_reference, reference, target, alpha)
                )
    return pd.DataFrame(rows, columns=list(DETECTABLE_COLUMNS))


def _median_key(values: dict[str, float]) -> str:
    """The configuration at the median of `values` (the lower middle one of an even count; ties by id)."""
    ranked = sorted(values, key=lambda c: (values[c], c))
    return ranked[(len(ranked) - 1) // 2]


def _points(x: float) -> str:
    return f"{100 * x:.0f}"


def benchmark_sentence(rows: pd.DataFrame) -> str:
    """What one benchmark's grid can and cannot show, in one sentence, from its rows of one slice
    (the report's and the card's)."""
    r0 = rows.iloc[0]
    found = rows["detectable_difference"].dropna()
    share = rows["power_at_reference"]
    if found.empty:
        # 0/1 scores: not even a difference of 1; seed means: not even the largest their magnitudes allow
        what = "no pair's difference in one configuration is found at 80 % power, up to the largest its design allows"
    elif len(found) < len(rows):
        what = (
            f"only {len(found)} of {len(rows)} pairs can be found at 80 % power at all (from a "
            f"{_points(found.min())}-point difference); the others at no size"
        )
    elif found.min() == found.max():
        what = f"a configuration's paired difference is found at 80 % power from {_points(found.min())} points"
    else:
        what = (
            f"a configuration's paired difference is found at 80 % power from {_points(found.min())} to "
            f"{_points(found.max())} points, depending on the pair"
        )
    ref = _points(r0.reference_effect)
    seen = (
        f"{100 * share.max():.1f} %"
        if share.min() == share.max()
        else f"{100 * share.min():.1f}-{100 * share.max():.1f} %"
    )
    return (
        f"{r0.benchmark}: at {int(r0.n_items)} items, Holm over {int(r0.n_configs)} configurations and the pairs' "
        f"discordance ({rows['discordance'].min():.2f}-{rows['discordance'].max():.2f}), {what}; a {ref}-point "
        f"difference is found {seen} of the time."
    )


def detectable_sentences(table: pd.DataFrame | None, slice_name: str = "full") -> list[str]:
    """One sentence per benchmark of `table` (detectable_table's) on one slice; none without it."""
    if table is None or table.empty:
        return []
    rows = table[table["slice"] == slice_name]
    return [benchmark_sentence(g) for _, g in rows.groupby("benchmark", sort=False)]
