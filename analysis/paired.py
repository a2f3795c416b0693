"""Two models' paired verdict (`safetyrepro verdict A B`): per shared configuration the paired
difference A - B over the items both answered, a 95 % interval for it, the exact paired sign-flip test
(the analysis's own, significance.sign_flip_p_value), Holm across the benchmark's configurations (the
analysis's family: one benchmark x pair), the difference those items could detect, and one sentence.

Who is ahead and who wins read the benchmark's declared direction, as `analyze` does: for a benchmark
where higher is better the p-values are the ones `safetyrepro analyze` writes to item_tests.csv
(p_value, slice full); for CrowS-Pairs (closer to 0.5 is better) they are its p_value_better, from the
same function (significance.pair_better_test), and `diff_better` is the difference in that reading.
What the items could detect is read from each configuration's own item differences (seed means
included), under the test that was run (power.detectable_from_differences)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from .direction import direction
from .grid_io import Grid
from .power import detectable_from_differences
from .significance import ItemRecords, exact_mean, holm, pair_better_test, sign_flip_p_value

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
    "diff_better",
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
    family_size: dict[str, int] = field(default_factory=dict)  # benchmark -> K, the configurations Holm covers
    missing: dict[str, list[str]] = field(default_factory=dict)  # benchmark -> configurations not in the family


def t_interval(d: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """A t interval for the mean paired difference (the items are the sample)."""
    n = len(d)
    if n < 2:
        return float("nan"), float("nan")
    mean, se = exact_mean(d), float(np.std(d, ddof=1) / np.sqrt(n))
    if se == 0:
        return mean, mean
    h = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return mean - h, mean + h


def paired_verdict(
    items: ItemRecords, grid: Grid, a: str, b: str, alpha: float = 0.05, declared: dict[str, list[str]] | None = None
) -> PairedVerdict:
    """A's and B's verdict over every configuration both have item records for, in the user's order.
    `declared`: per benchmark, the configurations the inputs named for either model (default: the
    grid's); those without paired records are listed as missing from the Holm family, never dropped
    without a word."""
    ca, cb = items.column(a), items.column(b)
    rows, missing = [], {}
    for benchmark in grid.benchmarks:
        better = direction(benchmark)
        ids = [c for c in grid.config_ids(benchmark) if c in items.by_config and len(items.by_config[c])]
        named = (declared or {}).get(benchmark, grid.config_ids(benchmark))
        missing[benchmark] = [c for c in dict.fromkeys([*grid.config_ids(benchmark), *named]) if c not in ids]
        for cid in ids:
            x = items.by_config[cid]
            d = x[:, ca] - x[:, cb]
            raw = exact_mean(d)
            read = (
                (raw, sign_flip_p_value(d))
                if better.monotone
                else pair_better_test(x[:, ca], x[:, cb], better, cid, a, b)
            )
            rows.append([benchmark, cid, a, b, len(d), int(np.count_nonzero(d)), raw, *t_interval(d), *read])
    for benchmark, named in (declared or {}).items():
        if benchmark not in grid.benchmarks and named:
            missing[benchmark] = list(named)
    table = pd.DataFrame(rows, columns=list(COLUMNS[:11]))
    parts, detectable, sentences, sizes = [], {}, {}, {}
    for benchmark, g in table.groupby("benchmark", sort=False):
        reject, adjusted = holm(g["p_value"].to_numpy(), alpha)
        ahead = g["diff_better"]
        winner = np.where(reject & (ahead > 0), a, np.where(reject & (ahead < 0), b, "n.s."))
        g = g.assign(p_holm=adjusted, winner=winner, family_size=len(g))
        parts.append(g)
        sizes[benchmark] = len(g)
        found = None
        if direction(benchmark).monotone:
            found = [
                detectable_from_differences(
                    items.by_config[c][:, ca] - items.by_config[c][:, cb], len(g), alpha, TARGET_POWER
                ).effect
                for c in g["config_id"]
            ]
            detectable[benchmark] = min((f for f in found if f is not None), default=None)
        else:
            detectable[benchmark] = None
        sentences[benchmark] = verdict_sentence(g, a, b, found, alpha, missing.get(benchmark, []))
    table = pd.concat(parts, ignore_index=True)[list(COLUMNS)] if parts else pd.DataFrame(columns=list(COLUMNS))
    missing = {k: v for k, v in missing.items() if v}
    for benchmark, gone in missing.items():
        if benchmark not in sentences:  # not one configuration to test: said, not left out silently
            sentences[benchmark] = (
                f"{benchmark}: no verdict: none of its {len(gone)} configurations has paired item records for both "
                f"{a} and {b} ({', '.join(gone[:3])}{' ...' if len(gone) > 3 else ''})."
            )
    return PairedVerdict(a, b, table, detectable, sentences, alpha, sizes, missing)


def _power_clause(found: list[float | None] | None, wins: int, k: int, better) -> str:
    """What the configurations' own items could detect (power.detectable_from_differences per
    configuration); a configuration that was just confirmed is never called undetectable."""
    if found is None:
        return (
            f"the power of the {better.comparative} reading (a label-swap test) is not modelled; read the "
            f"interval of each configuration"
        )
    sizes = [f for f in found if f is not None]
    if not sizes:
        if wins:
            return (
                f"at Holm's first-step level (alpha/{k}) no configuration's difference is found at 80 % power; "
                f"the confirmed ones passed a later Holm step"
            )
        return "no difference in one configuration is found at 80 % power at this size, however large"
    low, high = 100 * min(sizes), 100 * max(sizes)
    span = f"{low:.0f} points" if f"{low:.0f}" == f"{high:.0f}" else f"{low:.0f}-{high:.0f} points, by configuration"
    if len(sizes) == len(found):
        return f"a configuration's difference is found at 80 % power from {span} (its items' own differences)"
    return (
        f"{len(sizes)} of {k} configurations can find a difference at 80 % power (from {span}), the others at no "
        f"size (their items' own differences)"
    )


def verdict_sentence(
    g: pd.DataFrame, a: str, b: str, found: list[float | None] | None, alpha: float, missing: Sequence[str] = ()
) -> str:
    """Winner first, with the scores' difference it rests on, the Holm family (and what is missing from
    it) and what the items could detect. Ahead and behind read the benchmark's declared direction."""
    benchmark, k, n = g["benchmark"].iloc[0], len(g), int(g["n_items"].min())
    better = direction(benchmark)
    wins_a, wins_b = int((g["winner"] == a).sum()), int((g["winner"] == b).sum())
    ahead_a, ahead_b = int((g["diff_better"] > 0).sum()), int((g["diff_better"] < 0).sum())
    could = _power_clause(found, wins_a + wins_b, k, better)
    reading = "" if better.monotone else f" ({better.comparative} is better)"
    if wins_a and wins_b:
        head = (
            f"{benchmark}{reading}: the verdict flips: {a} is confirmed ahead on {wins_a} and {b} on {wins_b} of {k} "
            f"configurations"
        )
    elif wins_a or wins_b:
        win, lose, w, behind = (a, b, wins_a, ahead_b) if wins_a else (b, a, wins_b, ahead_a)
        best = g.loc[(g["diff_better"] if win == a else -g["diff_better"]).idxmax()]
        head = (
            f"{benchmark}{reading}: {win} is better than {lose}, confirmed on {w} of {k} configurations (largest: "
            f"{abs(best['diff_better']):.3f} on {best['config_id']}); {lose} is ahead, unconfirmed, on {behind}"
        )
    else:
        head = (
            f"{benchmark}{reading}: no configuration's difference is confirmed ({a} ahead on {ahead_a}, {b} on "
            f"{ahead_b}, tied on {k - ahead_a - ahead_b} of {k})"
        )
    family = f"Holm over {k} configurations"
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        family += f" ({len(missing)} of {k + len(missing)} left out: no paired item records for both: {shown})"
    test = "exact paired test" if better.monotone else "paired label-swap test"
    return f"{head}; {test}, {family} at alpha {alpha}, {n} items: {could}."
