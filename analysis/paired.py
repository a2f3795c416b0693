"""Two models' paired verdict (`safetyrepro verdict A B`): per shared configuration the paired
difference A - B over the items both answered, a 95 % interval for it, the exact paired sign-flip test
(the analysis's own, significance.sign_flip_p_value), Holm across the benchmark's configurations (the
analysis's family: one benchmark x pair), the difference those items could detect, and one sentence.

The p-values are the ones `safetyrepro analyze` writes to item_tests.csv (slice full) for the same
grid and items: the same functions compute them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from .grid_io import Grid
from .power import detectable_difference, effective_discordance
from .significance import ItemRecords, exact_mean, holm, sign_flip_p_value

TARGET_POWER = 0.8
COLUMNS = (
    "benchmark",
    "config_id",
    "model_a",
    "model_b",
    "n_items",
    "n_differing",
    "diff",
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",
    "winner",
    "family_size",
)


@dataclass(frozen=True)
class PairedVerdict:
    model_a: str
    model_b: str
    table: pd.DataFrame  # one row per shared configuration (COLUMNS)
    detectable: dict[str, float | None]  # benchmark -> smallest difference found at 80 % power (None: none is)
    sentences: dict[str, str]  # benchmark -> the verdict in one sentence
    alpha: float


def _interval(d: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """A t interval for the mean paired difference (the items are the sample)."""
    n = len(d)
    if n < 2:
        return float("nan"), float("nan")
    mean, se = exact_mean(d), float(np.std(d, ddof=1) / np.sqrt(n))
    if se == 0:
        return mean, mean
    h = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return mean - h, mean + h


def paired_verdict(items: ItemRecords, grid: Grid, a: str, b: str, alpha: float = 0.05) -> PairedVerdict:
    """A's and B's verdict over every configuration both have item records for, in the user's order."""
    ca, cb = items.column(a), items.column(b)
    rows = []
    for benchmark in grid.benchmarks:
        ids = [c for c in grid.config_ids(benchmark) if c in items.by_config and len(items.by_config[c])]
        for cid in ids:
            x = items.by_config[cid]
            d = x[:, ca] - x[:, cb]
            rows.append(
                [
                    benchmark,
                    cid,
                    a,
                    b,
                    len(d),
                    int(np.count_nonzero(d)),
                    exact_mean(d),
                    *_interval(d),
                    sign_flip_p_value(d),
                ]
            )
    table = pd.DataFrame(rows, columns=list(COLUMNS[:10]))
    parts, detectable, sentences = [], {}, {}
    for benchmark, g in table.groupby("benchmark", sort=False):
        reject, adjusted = holm(g["p_value"].to_numpy(), alpha)
        winner = np.where(reject & (g["diff"] > 0), a, np.where(reject & (g["diff"] < 0), b, "n.s."))
        g = g.assign(p_holm=adjusted, winner=winner, family_size=len(g))
        parts.append(g)
        ids = list(g["config_id"])
        disc = float(
            np.mean([effective_discordance(items.by_config[c][:, ca] - items.by_config[c][:, cb]) for c in ids])
        )
        found = (
            detectable_difference(int(g["n_items"].min()), disc, len(g), alpha, TARGET_POWER).effect
            if disc > 0
            else None
        )
        detectable[benchmark] = found
        sentences[benchmark] = verdict_sentence(g, a, b, found, alpha)
    table = pd.concat(parts, ignore_index=True)[list(COLUMNS)] if parts else pd.DataFrame(columns=list(COLUMNS))
    return PairedVerdict(a, b, table, detectable, sentences, alpha)


def verdict_sentence(g: pd.DataFrame, a: str, b: str, found: float | None, alpha: float) -> str:
    """Winner first, with the scores' difference it rests on and what the items could detect."""
    benchmark, k, n = g["benchmark"].iloc[0], len(g), int(g["n_items"].min())
    wins_a, wins_b = int((g["winner"] == a).sum()), int((g["winner"] == b).sum())
    ahead_a, ahead_b = int((g["diff"] > 0).sum()), int((g["diff"] < 0).sum())
    could = (
        "no difference in one configuration is found at 80 % power at this size, however large"
        if found is None
        else f"a configuration's difference must be at least {100 * found:.0f} points to be found at 80 % power"
    )
    if wins_a and wins_b:
        head = (
            f"{benchmark}: the verdict flips: {a} is confirmed ahead on {wins_a} and {b} on {wins_b} of {k} "
            f"configurations"
        )
    elif wins_a or wins_b:
        win, lose, w, behind = (a, b, wins_a, ahead_b) if wins_a else (b, a, wins_b, ahead_a)
        best = g.loc[(g["diff"] if win == a else -g["diff"]).idxmax()]
        head = (
            f"{benchmark}: {win} is better than {lose}, confirmed on {w} of {k} configurations (largest: "
            f"{abs(best['diff']):.3f} on {best['config_id']}); {lose} is ahead, unconfirmed, on {behind}"
        )
    else:
        head = (
            f"{benchmark}: no configuration's difference is confirmed ({a} ahead on {ahead_a}, {b} on {ahead_b}, "
            f"tied on {k - ahead_a - ahead_b} of {k})"
        )
    return f"{head}; exact paired test, Holm over {k} configurations at alpha {alpha}, {n} items: {could}."
