"""Issue 53, items 2 and 3: the detectable difference read from the design (not the observed disagreement, and
under the test run on seed means), and an equivalence test that counts the tied items. Numbers are checked
against the audit's, against exact computations of size and power, and by simulation."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta, binom, binomtest
from tost_by_hand import tost_by_hand

from safetyrepro.analysis.paired import detectable as detectable_module
from safetyrepro.analysis.paired.power import (
    ASSUMED_DISCORDANCE,
    detectable_difference,
    detectable_from_differences,
    power_from_differences,
)
from safetyrepro.analysis.paired.significance import ItemRecords, sign_flip_p_value
from safetyrepro.analysis.paired.tost import (
    EXACT,
    MIN_T_DIFFERING,
    region_probability,
    score_statistic,
    sup_over_discordance,
    t_tost_p_values,
    thresholds,
    tost,
)
from safetyrepro.analysis.paired.two_runs import PairedScores, compare
from safetyrepro.analysis.render.two_runs_report import text_report
from safetyrepro.cli import main

ALPHA = 0.05


# -- TOST on 0/1 scores: the ties count ------------------------------------------------------------------
def test_all_tied_runs_are_equivalent_within_5_points_from_59_items():
    """The audit: all-tied runs gave p = 1.000 from 50 to 134 items. An exact test gives (1 - M)^n where the
    sup over the discordance sits at D = M: 0.0485 at 59 items. At 100 items the score ordering's sup moves to
    D = 1 (0.0138; the Wald ordering's region gives the audit's 0.0059): both far below alpha."""
    assert tost(np.zeros(50), 0.05).p_value == pytest.approx(0.95**50, rel=1e-9)  # 0.077: not yet
    at_59 = tost(np.zeros(59), 0.05)
    assert at_59.test == EXACT and at_59.p_value == pytest.approx(0.95**59, rel=1e-9)
    assert round(at_59.p_value, 4) == 0.0485
    at_100 = tost(np.zeros(100), 0.05).p_value
    assert at_100 == pytest.approx(tost_by_hand(np.zeros(100), 0.05), rel=1e-9)
    assert round(at_100, 4) == 0.0138
    for n, same in ((50, False), (59, True), (100, True), (134, True)):
        v = compare([PairedScores("t", "acc", np.ones(n), np.ones(n), True)], "A", "B", margin=0.05)
        assert bool(v.table.iloc[0]["equivalent"]) is same, n


def _critical_score(n: int, margin: float) -> float:
    """The smallest score whose exact p-value is <= alpha: the test rejects exactly when the observed score
    reaches it (the p-value falls as the score grows: nested regions)."""
    w, ell = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = w + ell <= n
    scores = np.unique(score_statistic(w[keep], ell[keep], n, margin))

    def p(z: float) -> float:
        m, t = thresholds(n, margin, z)
        return sup_over_discordance(lambda ds: [region_probability(n, margin, m, t, d) for d in ds], margin)

    lo, hi = 0, len(scores) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if p(scores[mid]) <= ALPHA else (mid + 1, hi)
    return float(scores[lo])


def test_the_exact_tost_holds_its_level_at_the_margin_for_every_discordance():
    """Exact size: the rejection region {score >= z_crit}, its probability at E = -M summed over every outcome
    for 600 discordances (not tost.py's grid), and inside the null (E = -0.15) too."""
    n, margin = 120, 0.1
    z = _critical_score(n, margin)
    m, t = thresholds(n, margin, z)
    sizes = [region_probability(n, margin, m, t, d) for d in np.linspace(margin, 1.0, 600)]
    assert max(sizes) <= ALPHA * (1 + 1e-9)
    assert max(sizes) > 0.8 * ALPHA  # and it uses its level, unlike a test that never rejects
    inside = []
    for d in np.linspace(0.15, 1.0, 100):  # E = -0.15: each discordant item to A with (1 - 0.15/D)/2
        p = (1 - 0.15 / d) / 2
        inside.append(float(binom.pmf(m, n, d) @ binom.sf(t - 1, m, p)))
    assert max(inside) < max(sizes)
    # tost() itself rejects exactly on that region: outcomes on either side of it
    for wins, losses in ((0, 0), (3, 3), (10, 12), (2, 9), (0, 5)):
        reached = score_statistic(wins, losses, n, margin) >= z
        d = np.r_[np.ones(wins), -np.ones(losses), np.zeros(n - wins - losses)]
        assert (tost(d, margin).p_lower <= ALPHA) == bool(reached), (wins, losses)


def test_the_exact_tost_holds_its_level_by_simulation_where_ties_dominate():
    """At the margin with a discordance just above it (D = 0.06, M = 0.05, 60 items: most runs all tied or
    nearly), the lower test rejects at most alpha of the time (Clopper-Pearson lower bound below alpha)."""
    rng = np.random.default_rng(53)
    n, margin, runs, d = 60, 0.05, 20_000, 0.06
    p_a, p_b = (d - margin) / 2, (d + margin) / 2  # E = -0.05
    wins = rng.binomial(n, p_a, runs)
    losses = rng.binomial(n - wins, p_b / (1 - p_a))
    outcomes, counts = np.unique(np.c_[wins, losses], axis=0, return_counts=True)
    rejected = 0
    for (w, ell), c in zip(outcomes, counts, strict=True):  # one exact p-value per distinct outcome
        x = np.r_[np.ones(w), -np.ones(ell), np.zeros(n - w - ell)]
        rejected += int(c) * (tost(x, margin).p_lower <= ALPHA)
    assert rejected / runs > 0.02  # all-tied runs (p = 0.95^60 = 0.046) are claimed: the test is not idle
    assert beta.ppf(0.025, rejected, runs - rejected + 1) < ALPHA


def _old_tost_rejects_both(w: np.ndarray, m: int, n: int, margin: float, gamma: float = 0.001) -> np.ndarray:
    """The former test (binomial on the discordant items at the discordance's 99.9 % upper bound, + 0.001)."""
    upper = beta.ppf(1 - gamma, m + 1, n - m) if m < n else 1.0
    if margin >= upper:
        return np.ones_like(w, dtype=bool)
    if m == 0:
        return np.zeros_like(w, dtype=bool)
    q = (1 - margin / upper) / 2
    lower = binom.sf(w - 1, m, q) + gamma
    upper_side = binom.cdf(w, m, 1 - q) + gamma
    return (lower <= ALPHA) & (upper_side <= ALPHA)


def test_power_at_no_difference_with_ties_is_near_the_paired_t_tost():
    """The audit: at E = 0 and 400 items (D = 0.1, M = 0.05) the former test had power 25 %, a paired t TOST 87 %.
    Exact power of both sides: the lower region W >= t_m and, by symmetry, the upper region L >= t_m."""
    n, margin, d = 400, 0.05, 0.1
    z = _critical_score(n, margin)
    m, t = thresholds(n, margin, z)
    both = np.where(m - t >= t, binom.cdf(m - t, m, 0.5) - binom.cdf(t - 1, m, 0.5), 0.0)
    new = float(binom.pmf(m, n, d) @ both)
    old = sum(
        float(
            binom.pmf(k, n, d)
            * binom.pmf(np.arange(k + 1), k, 0.5)[_old_tost_rejects_both(np.arange(k + 1), k, n, margin)].sum()
        )
        for k in range(n + 1)
    )
    assert abs(old - 0.25) < 0.01  # 0.244
    assert round(new, 3) == 0.843
    # tost() agrees with the region on a typical run: 20 wins each way, 360 ties
    assert tost(np.r_[np.ones(20), -np.ones(20), np.zeros(360)], margin).p_value <= ALPHA


# -- TOST on bounded scores, fixed n ---------------------------------------------------------------------
def _five_seed_differences(rng, runs: int, n: int, margin: float) -> np.ndarray:
    """Five-seed means of two models at E = -margin: 60 % of the items easy for both (0.95), the rest 0.5 for A
    and 0.5 + margin / 0.4 for B."""
    easy = rng.random((runs, n)) < 0.6
    a = np.where(easy, rng.binomial(5, 0.95, (runs, n)), rng.binomial(5, 0.5, (runs, n))) / 5
    b = np.where(easy, rng.binomial(5, 0.95, (runs, n)), rng.binomial(5, 0.5 + margin / 0.4, (runs, n))) / 5
    return a - b


def _skewed_differences(rng, runs: int, n: int, margin: float) -> np.ndarray:
    """A fails badly on 8 % of the items (-1) and gains a little on others (+0.2): mean -margin, left-skewed,
    where the plain t TOST rejected 7 % of the time at 200 items."""
    u = rng.random((runs, n))
    return np.where(u < 0.08, -1.0, np.where(u < 0.08 + (0.08 - margin) / 0.2, 0.2, 0.0))


@pytest.mark.parametrize(
    ("make", "n"), [(_five_seed_differences, 200), (_skewed_differences, 200), (_skewed_differences, 400)]
)
def test_the_bounded_score_tost_holds_its_level_at_the_margin(make, n):
    rng = np.random.default_rng(n)
    runs, margin = 20_000, 0.05
    d = make(rng, runs, n, margin)
    t_read = (d != 0).sum(1) >= MIN_T_DIFFERING  # the t TOST; the few others read the betting e-process
    lower, _ = t_tost_p_values(d, margin)
    rejected = int((lower[t_read] <= ALPHA).sum()) + sum(tost(x, margin).p_lower <= ALPHA for x in d[~t_read])
    assert beta.ppf(0.025, rejected, runs - rejected + 1) < ALPHA
    assert rejected / runs > 0.03  # not idle either
    assert tost(d[0], margin).p_lower == pytest.approx(float(lower[0]), rel=1e-12)


def test_a_fixed_n_bounded_tost_finds_equivalence_that_the_anytime_one_misses():
    rng = np.random.default_rng(5)
    d = _five_seed_differences(rng, 1, 400, 0.0)[0]  # no true difference, 400 items
    fixed, anytime = tost(d, 0.05), tost(d, 0.05, anytime=True)
    assert fixed.p_value <= ALPHA < anytime.p_value


# -- the detectable difference from the design ------------------------------------------------------------
def _mcnemar_power(n: int, d: float, e: float, level: float) -> float:
    """Directional power of the exact two-sided McNemar test by summing over (M, W), scipy's binomtest."""
    p = (1 + e / d) / 2
    total = 0.0
    for m in range(n + 1):
        weight = binom.pmf(m, n, d)
        if weight < 1e-15:
            continue
        wins = [w for w in range(m // 2 + 1, m + 1) if binomtest(w, m, 0.5).pvalue <= level]
        total += weight * sum(binom.pmf(w, m, p) for w in wins)
    return total


def test_fifty_tied_items_detect_a_difference_at_the_plans_assumed_discordance():
    n = 50
    v = compare([PairedScores("t", "acc", np.ones(n), np.ones(n), True)], "A", "B")
    row = v.table.iloc[0]
    found = row["detectable"]
    assert ASSUMED_DISCORDANCE == 0.3
    assert found == pytest.approx(0.2188, abs=1e-4)
    assert row["detectable_basis"] == (
        "the exact McNemar test at the discordance plan assumes, 0.3 (no item differs in these runs; items as "
        "draws, M ~ Bin(n, D))"
    )
    assert _mcnemar_power(n, 0.3, found, ALPHA) >= 0.8 - 1e-9
    assert _mcnemar_power(n, 0.3, found - 0.005, ALPHA) < 0.8
    text = text_report(v)
    assert "however large" not in text
    assert "these 50 items find a true difference of 0.219 with 80 % power at alpha/1" in text


def test_a_difference_above_the_observed_discordance_is_read_at_that_difference():
    """One discordant item of 50: D = 0.02 observed, but a true difference E needs at least E discordance, so
    the power at E is read at D = E (every discordant item to A), not "none"."""
    d = np.r_[1.0, np.zeros(49)]
    r = detectable_from_differences(d, 1)
    assert "observed discordance 0.020 (1 of 50 items differ" in r.basis
    # at D = E every discordant item goes to A: reject when M >= 6 (2 / 2^6 <= 0.05)
    assert binom.sf(5, 50, r.effect) >= 0.8 - 1e-9 > binom.sf(5, 50, r.effect - 1e-3)


def _seed_means(rng, n: int) -> np.ndarray:
    """One configuration's five-seed item differences A - B: most items easy for both, a third uncertain."""
    hard = rng.random(n) < 0.35
    p = np.where(hard, 0.5, 0.97)
    return (rng.binomial(5, p) - rng.binomial(5, p)) / 5


def _monte_carlo_power(d: np.ndarray, effect: float, level: float, runs: int, rng) -> float:
    """The exact sign-flip test (significance.sign_flip_p_value) on the items' magnitudes, each differing item
    to A with (1 + E / mean|d|) / 2: how often it claims A."""
    mags = np.abs(d)
    p = (1 + effect / mags.mean()) / 2
    hits = 0
    for _ in range(runs):
        x = np.where(rng.random(len(d)) < p, mags, -mags)
        hits += x.sum() > 0 and sign_flip_p_value(x) <= level
    return hits / runs


def test_analyze_detectable_on_seed_means_is_the_sign_flip_tests_own(monkeypatch):
    """detectable.csv on five-seed means: the exact sign-flip test's 80 %-power difference on the median
    configuration, not the 0/1 model read at mean |d| (which overstated it about 1.6 times)."""
    rng = np.random.default_rng(11)
    configs = {f"truthfulqa/T{i}/moderate/0shot/logprob": _seed_means(rng, 300) for i in range(3)}
    items = ItemRecords(
        ("a", "b"), {c: np.c_[0.5 + d / 2, 0.5 - d / 2] for c, d in configs.items()}, (), "test"
    )  # any scores whose difference is d
    grid = SimpleNamespace(benchmarks=("truthfulqa",), models=("a", "b"))
    monkeypatch.setattr(detectable_module, "slice_config_ids", lambda g, r, b, name: tuple(configs))
    table = detectable_module.detectable_table(items, grid, None, ["full"], ALPHA)
    (row,) = table.to_dict("records")
    spread = {c: float(np.abs(d).mean()) for c, d in configs.items()}
    median = sorted(spread, key=spread.get)[1]
    new = detectable_from_differences(configs[median], 3, ALPHA).effect
    old = detectable_difference(300, row["discordance"], 3, ALPHA).effect
    assert row["detectable_difference"] == new
    assert row["power_at_reference"] == power_from_differences(configs[median], 0.1, 3, ALPHA)
    assert old / new > 1.4  # the former 0/1 model's overstatement
    mc = _monte_carlo_power(configs[median], new, ALPHA / 3, 1500, rng)
    assert abs(mc - 0.8) < 3 * np.sqrt(0.16 / 1500)
    assert _monte_carlo_power(configs[median], old, ALPHA / 3, 500, rng) > 0.97


def test_plan_from_a_seed_mean_pilot_reads_the_sign_flip_test(tmp_path, capsys):
    rng = np.random.default_rng(12)
    config = "truthfulqa/T2/moderate/0shot/free_form"
    n = 200
    hard = rng.random(n) < 0.35
    p = np.where(hard, 0.5, 0.97)
    rows = []
    for model in ("a", "b"):
        answers = rng.random((n, 5)) < p[:, None]
        rows += [(model, config, f"i{i}", s, int(answers[i, s])) for i in range(n) for s in range(5)]
    items = pd.DataFrame(rows, columns=["model", "config_id", "item_id", "seed", "item_score"])
    items.to_csv(tmp_path / "items.csv", index=False)
    pd.DataFrame(
        [(m, "truthfulqa", config, n, "ok") for m in "ab"],
        columns=["model", "benchmark", "config_id", "n_items", "status"],
    ).to_csv(tmp_path / "grid.csv", index=False)
    assert main(["plan", str(tmp_path / "grid.csv"), "--json"]) == 0
    [r] = json.loads(capsys.readouterr().out)
    wide = items.groupby(["item_id", "model"])["item_score"].mean().unstack("model")
    d = (wide["a"] - wide["b"]).to_numpy()
    assert r["detectable_difference"] == detectable_from_differences(d, 1, ALPHA).effect
    assert r["detectable_basis"].startswith("the exact sign-flip test on these items' own differences")
    assert detectable_difference(n, r["discordance"], 1, ALPHA).effect / r["detectable_difference"] > 1.4


def test_plan_on_a_pilot_whose_models_never_differ_reads_the_assumed_discordance(tmp_path, capsys):
    config = "truthfulqa/T1/greedy/0shot/logprob"
    rows = [(m, config, f"i{i}", 0, i % 2) for m in "ab" for i in range(60)]
    pd.DataFrame(rows, columns=["model", "config_id", "item_id", "seed", "item_score"]).to_csv(
        tmp_path / "items.csv", index=False
    )
    pd.DataFrame(
        [(m, "truthfulqa", config, 60, "ok") for m in "ab"],
        columns=["model", "benchmark", "config_id", "n_items", "status"],
    ).to_csv(tmp_path / "grid.csv", index=False)
    assert main(["plan", str(tmp_path / "grid.csv"), "--json"]) == 0
    [r] = json.loads(capsys.readouterr().out)
    assert r["discordance"] == 0 and r["detectable_difference"] == detectable_from_differences(np.zeros(60), 1).effect
    assert r["items_needed"] is not None and "the discordance plan assumes, 0.3" in r["note"]
