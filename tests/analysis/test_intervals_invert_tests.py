"""Issue 53, item 1: the interval printed beside `verdict`'s exact paired test inverts that test, at the row's
Holm level (analysis/paired/sign_flip.py: paired_interval, holm_levels). The audit's cases (5 items all won by A gave
"1.000 to 1.000", 50 tied items "0.000 to 0.000", 5 fractional items an interval excluding 0 beside p = 0.062,
a `verdict --grid` row 0.031 to 0.769 beside p = 0.125, n.s.), coverage by simulation, and agreement with the
test over many random families: no interval excludes 0 on a row the test does not confirm."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta

from safetyrepro.analysis.paired.paired import row_intervals
from safetyrepro.analysis.paired.sign_flip import (
    HOEFFDING_INTERVAL,
    MCNEMAR_INTERVAL,
    SIGN_FLIP_INTERVAL,
    SIGN_FLIP_NORMAL_INTERVAL,
    holm_levels,
    mcnemar_interval,
    paired_interval,
    sign_flip_p_value,
)
from safetyrepro.analysis.paired.two_runs import PairedScores, compare
from safetyrepro.analysis.render.two_runs_report import sentences
from safetyrepro.cli import main
from safetyrepro.grid_schema import grid_row
from safetyrepro.tasks.envelope import Config, default_rules

ALPHA = 0.05


def _not_above(misses: int, reps: int, alpha: float = ALPHA) -> bool:
    """The miss rate is not shown above alpha: its one-sided 99.9 % Clopper-Pearson lower bound is <= alpha."""
    return misses == 0 or beta.ppf(0.001, misses, reps - misses + 1) <= alpha


# -- the audit's cases ------------------------------------------------------------------------------------------


def test_five_items_all_won_by_a_give_an_interval_that_contains_0_beside_p_0_0625():
    d = np.ones(5)
    assert sign_flip_p_value(d) == pytest.approx(0.0625)
    iv = paired_interval(d, ALPHA)
    # psi: Clopper-Pearson 5 of 5 at 97.5 % -> [0.0063^(1/5), 1]; pi likewise: low = (2 psi_lo - 1) pi_hi
    psi_lo = 0.0125 ** (1 / 5)
    assert iv.low == pytest.approx(2 * psi_lo - 1) and iv.low == pytest.approx(-0.1674, abs=1e-4)
    assert iv.high == 1.0 and iv.method == MCNEMAR_INTERVAL


def test_fifty_tied_items_give_an_interval_of_width_not_zero():
    iv = paired_interval(np.zeros(50), ALPHA)
    # no discordant item: psi is free, pi <= the Clopper-Pearson upper end of 0 of 50 at 97.5 %
    assert iv.high == pytest.approx(1 - 0.0125 ** (1 / 50)) and iv.low == -iv.high
    assert iv.high == pytest.approx(0.0839, abs=1e-4)


def test_five_fractional_items_with_exact_p_0_062_give_an_interval_that_contains_0():
    d = np.array([0.2, 0.4, 0.6, 0.2, 0.8])
    assert sign_flip_p_value(d) == pytest.approx(0.0625)
    iv = paired_interval(d, ALPHA)
    # 5 items can never reach p <= 0.05 (the smallest is 2/32): no shift is rejected, the interval is [-1, 1]
    assert (iv.low, iv.high) == (-1.0, 1.0) and iv.method == SIGN_FLIP_INTERVAL


def test_equal_fractional_differences_fall_back_to_hoeffding_and_reach_0_where_the_test_does_not_reject():
    few = paired_interval(np.full(4, 0.4), ALPHA)  # p = 2/16: not rejected
    h = np.sqrt(2 * np.log(2 / ALPHA) / 4)
    assert few.method == HOEFFDING_INTERVAL and (few.low, few.high) == pytest.approx((0.4 - h, 1.0))
    many = paired_interval(np.full(200, 0.4), ALPHA)  # p = 2^-199: rejected
    h = np.sqrt(2 * np.log(2 / ALPHA) / 200)  # 0.192
    assert (many.low, many.high) == pytest.approx((0.4 - h, 0.4 + h)) and many.low > 0


def _write_grid(folder: Path, a: np.ndarray, b: np.ndarray, config_ids: list[str]) -> Path:
    """A grid of two models on these configurations, every one the same (items x 5 seeds) 0/1 answers."""
    rules = default_rules()
    rows, items = [], []
    for model, x in (("smollm2", a), ("gemma3-270m", b)):
        for cid in config_ids:
            cfg = Config.from_id(cid)
            seeds = rules.seeds(cfg.decoding)
            score = float(x.mean(axis=0).mean())
            rows.append(
                grid_row(model, cfg, "bf16", "lm-eval", len(x), 5, score, 1.0, rules.tier(cfg), cid, status=None)
            )
            for i, j in itertools.product(range(len(x)), range(5)):
                items.append(
                    {"model": model, "config_id": cid, "item_id": f"i{i}", "seed": seeds[j], "item_score": x[i, j]}
                )
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / "grid.csv", index=False)
    pd.DataFrame(items).to_parquet(folder / "items.parquet", index=False)
    return folder / "grid.csv"


MODERATE = [c.config_id for c in default_rules().configs("xstest", "full") if c.decoding == "moderate"]


def test_a_grid_row_with_p_0_125_not_confirmed_has_an_interval_that_contains_0(tmp_path, capsys):
    # 12 items x 5 seeds: A answers right on 1-4 more seeds than B on 4 items (seed-mean differences 0.2, 0.4,
    # 0.6, 0.8), the same on the others: the exact sign-flip p is 2/16 = 0.125
    a, b = np.zeros((12, 5)), np.zeros((12, 5))
    for i in range(4):
        a[i, : i + 1] = 1
    a[4:, :2] = b[4:, :2] = 1
    grid = _write_grid(tmp_path / "g", a, b, MODERATE[:1])
    capsys.readouterr()
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    (row,) = v["configurations"]
    assert row["p_value"] == pytest.approx(0.125) and row["winner"] == "n.s."
    assert row["ci_low"] < 0 < row["diff"] < row["ci_high"] and row["ci_level"] == 0.95
    assert row["ci_method"] == SIGN_FLIP_INTERVAL
    assert v["interval_note"].startswith("ci_low, ci_high: a 95 % interval for A - B in scores that inverts its test")
    assert main(["verdict", "smollm2", "gemma3-270m", "--grid", str(grid)]) == 0
    out = capsys.readouterr().out
    assert "so it excludes 0 only where the row is confirmed" in out and "ci_level" in out


# -- Holm: each row's level, and agreement with the decision -----------------------------------------------------


def test_holm_levels_are_alpha_over_k_minus_r_plus_1_for_rejected_rows_and_the_first_kept_rank_for_the_rest():
    reject, level = holm_levels([0.5, 0.001, 0.03, 0.012], ALPHA)
    # sorted: 0.001 (x4 = 0.004, rejected), 0.012 (x3 = 0.036, rejected), 0.03 (x2 = 0.06, kept: s = 3), 0.5
    assert reject.tolist() == [False, True, False, True]
    assert level == pytest.approx([ALPHA / 2, ALPHA / 4, ALPHA / 2, ALPHA / 3])


def _random_differences(rng: np.random.Generator) -> np.ndarray:
    """One row's item differences: 0/1 or 5-seed means, few or many items, no effect or some."""
    n = int(rng.choice([6, 10, 14, 40, 250]))
    shift = float(rng.choice([0.0, 0.05, 0.15, 0.3]))
    u = rng.beta(0.7, 1.5, n)
    pa, pb = np.clip(u + shift, 0, 1), u
    if rng.random() < 0.5:
        return (rng.random(n) < pa).astype(float) - (rng.random(n) < pb).astype(float)
    return (rng.binomial(5, pa) - rng.binomial(5, pb)) / 5


def test_no_interval_excludes_0_on_a_row_holm_does_not_confirm_over_many_random_families():
    rng = np.random.default_rng(53)
    counts = {"rejected": 0, "kept": 0, "exact": 0, "normal": 0}
    for _ in range(150):
        diffs = [_random_differences(rng) for _ in range(3)]
        p = np.array([sign_flip_p_value(d) for d in diffs])
        reject, intervals = row_intervals(diffs, p, ALPHA, monotone=True)
        for d, r, iv in zip(diffs, reject, intervals, strict=True):
            excludes = iv.low > 0 or iv.high < 0
            assert iv.high > iv.low  # never zero width
            if not r:
                assert not excludes, (d, iv)
                counts["kept"] += 1
            else:
                counts["rejected"] += 1
                if iv.method != MCNEMAR_INTERVAL:  # the inverted test: excludes 0 exactly where Holm rejects
                    assert excludes, (d, iv)
            counts["normal" if iv.method == SIGN_FLIP_NORMAL_INTERVAL else "exact"] += iv.method != MCNEMAR_INTERVAL
    assert min(counts.values()) >= 10, counts  # every kind of row was met


def test_an_inverted_interval_ends_where_the_test_starts_to_reject():
    d = np.array([0.2, 0.4, -0.2, 0.6, 0.8, 0.2, 0.4, 0.0, 0.6, 0.2, -0.4, 0.4])
    iv = paired_interval(d, ALPHA)
    assert sign_flip_p_value(d - iv.high) <= ALPHA < sign_flip_p_value(d - (iv.high - 0.001))
    assert sign_flip_p_value(d - iv.low) <= ALPHA < sign_flip_p_value(d - (iv.low + 0.001))
    assert iv.low > 0 and sign_flip_p_value(d) <= ALPHA  # the test rejects 0, the interval excludes it


def test_two_runs_sentences_name_the_interval_and_its_holm_level():
    a = np.r_[np.ones(30), np.zeros(30)]
    b = np.r_[np.ones(12), np.zeros(48)]
    same = np.r_[np.ones(20), np.zeros(40)]
    pairs = [PairedScores("t1", "acc", a, b, True), PairedScores("t2", "acc", same, same, True)]
    v = compare(pairs, "x", "y", ALPHA)
    first, second = v.table.iloc[0], v.table.iloc[1]
    assert first["winner"] == "x" and first["ci_level"] == pytest.approx(1 - ALPHA / 2) and first["ci_low"] > 0
    assert second["winner"] == "" and second["ci_level"] == pytest.approx(1 - ALPHA) and second["ci_low"] < 0
    low, high = mcnemar_interval(18, 0, 60, ALPHA / 2)
    lines = sentences(v)
    assert f"A - B = +0.300 (exact 97.5 % interval, Holm-adjusted over 2: {low:.3f} to {high:.3f})" in lines[0]
    assert "A - B = +0.000 (exact 95 % interval, Holm-adjusted over 2: -0.070 to 0.070)" in lines[1]


# -- coverage -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, p10, p01", [(20, 0.3, 0.0), (40, 0.1, 0.1), (60, 0.2, 0.05), (30, 0.02, 0.0)])
def test_the_0_1_interval_covers_the_difference_at_least_as_often_as_its_level(n, p10, p01):
    rng = np.random.default_rng(n)
    reps = 2000
    counts = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=reps)
    misses = 0
    for wins_a, wins_b, _ in counts:
        low, high = mcnemar_interval(int(wins_a), int(wins_b), n, ALPHA)
        misses += not low <= p10 - p01 <= high
    assert _not_above(misses, reps), misses


def _seed_means(rng, reps: int, n: int, shift: float) -> tuple[np.ndarray, float]:
    """reps x n item differences of 5-seed means, skewed item difficulties; the true mean difference."""
    u = rng.beta(0.5, 3.0, (reps, n))
    pa, pb = 0.6 * u + 0.2 + shift, 0.6 * u + 0.2
    return (rng.binomial(5, pa) - rng.binomial(5, pb)) / 5, shift


@pytest.mark.parametrize("n, reps", [(12, 200), (300, 600)])
def test_the_fractional_interval_covers_the_difference_at_least_as_often_as_its_level(n, reps):
    rng = np.random.default_rng(n)
    d, truth = _seed_means(rng, reps, n, 0.1)
    misses = 0
    for row in d:
        iv = paired_interval(row, ALPHA)
        misses += not iv.low <= truth <= iv.high
    assert _not_above(misses, reps), misses
