"""Two runs of any task (analysis/paired/two_runs.py, tost.py): every number against an independent computation:
statsmodels' exact McNemar and Holm, a permutation enumerated by hand, scipy's binomtest for each side of
TOST, and the size of TOST at its margin by simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import beta
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from tost_by_hand import tost_by_hand

from safetyrepro.analysis.paired.power import detectable_from_differences
from safetyrepro.analysis.paired.tost import BETTING, EXACT, T_TOST, tost
from safetyrepro.analysis.paired.two_runs import MCNEMAR, SIGN_FLIP, PairedScores, compare
from safetyrepro.analysis.render.two_runs_report import headline, markdown_report, text_report
from safetyrepro.sequential.confidence_sequence import IidBettingCS


def _binary(n: int, p_a: float, p_b: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.random(n) < p_a).astype(float), (rng.random(n) < p_b).astype(float)


def test_mcnemar_holm_and_the_detectable_difference_are_the_independent_ones():
    pairs = [
        PairedScores("t1", "acc,none", *_binary(80, 0.85, 0.35, 1), True),
        PairedScores("t2", "acc,none", *_binary(80, 0.6, 0.55, 2), True),
        PairedScores("t3", "error_rate,none", *_binary(50, 0.8, 0.2, 3), False),
    ]
    v = compare(pairs, "A", "B", alpha=0.05)
    t = v.table
    assert v.family_size == 3 and list(t["test"]) == [MCNEMAR] * 3
    for (_, row), p in zip(t.iterrows(), pairs, strict=True):
        table = [
            [int(((p.a == 1) & (p.b == 1)).sum()), int(((p.a == 1) & (p.b == 0)).sum())],
            [int(((p.a == 0) & (p.b == 1)).sum()), int(((p.a == 0) & (p.b == 0)).sum())],
        ]
        assert row["p_value"] == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-12)
        assert row["diff"] == pytest.approx(p.a.mean() - p.b.mean(), abs=1e-15)
        assert row["detectable"] == detectable_from_differences(p.a - p.b, 3, 0.05, 0.8).effect
    reject, holm, _, _ = multipletests(t["p_value"], alpha=0.05, method="holm")
    assert t["p_holm"].to_numpy() == pytest.approx(holm, rel=1e-12)
    assert t.loc[0, "winner"] == ("A" if reject[0] else "")
    assert reject[0]  # 0.85 vs 0.35 on 80 items: confirmed (the test above would not catch a constant "")
    # t3 records lower is better: A's confirmed lead in the score makes B the better one
    assert t.loc[2, "direction"] == "lower is better" and reject[2] and t.loc[2, "winner"] == "B"


def test_the_sign_flip_test_on_epoch_means_is_the_permutation_enumerated_by_hand():
    # two epochs: item scores are epoch means on a lattice of 1/2; 12 items, 2**12 sign assignments
    a = np.array([1, 1, 0.5, 1, 0.5, 1, 0, 1, 1, 0.5, 1, 1])
    b = np.array([0.5, 0, 0.5, 0, 1, 0.5, 0, 0, 0.5, 0, 1, 0.5])
    d = a - b
    observed = abs(d.sum())
    flips = np.array(list(itertools.product((-1, 1), repeat=len(d))))
    by_hand = float(np.mean(np.abs(flips @ np.abs(d)) >= observed - 1e-12))
    v = compare([PairedScores("arith", "match", a, b, None, 2)], "A", "B")
    row = v.table.iloc[0]
    assert row["test"] == SIGN_FLIP and row["p_value"] == pytest.approx(by_hand, rel=1e-12)
    assert row["direction"] == "not recorded"
    # not recorded: a confirmed lead says "higher", never "better"
    assert row["winner"] in ("", "higher: A")
    assert "better" not in headline(v).split("(")[0] or row["winner"] == ""


@pytest.mark.parametrize(("n", "p_a", "p_b", "margin", "seed"), [(200, 0.6, 0.58, 0.1, 4), (60, 0.5, 0.3, 0.1, 5)])
def test_tost_on_0_1_scores_is_the_exact_unconditional_score_test_by_hand(n, p_a, p_b, margin, seed):
    a, b = _binary(n, p_a, p_b, seed)
    t = tost(a - b, margin)
    assert t.test == EXACT
    assert t.p_value == pytest.approx(tost_by_hand(a - b, margin), rel=1e-9)
    v = compare([PairedScores("t", "acc,none", a, b, True)], "A", "B", margin=margin)
    assert v.table.iloc[0]["p_tost"] == pytest.approx(t.p_value, rel=1e-12)
    assert bool(v.table.iloc[0]["equivalent"]) == (t.p_value <= 0.05)


def test_tost_is_equivalent_for_close_models_and_not_for_distant_ones():
    a = np.r_[np.ones(400), np.zeros(400)]
    b = a.copy()
    b[:20] = 0  # A ahead on 20 items, B on 10: a difference of 10 / 800
    b[400:410] = 1
    assert tost(a - b, 0.05).p_value < 0.01  # 30 discordant of 800: well within 5 points
    assert tost(a - b, 0.005).p_value > 0.5  # 0.0125 observed: not within half a point
    # never differing on 100 items: within 10 points at p = 0.00047 (the ties count)
    assert tost(np.zeros(100), 0.1).p_value == pytest.approx(tost_by_hand(np.zeros(100), 0.1), rel=1e-9)
    assert tost(np.zeros(100), 0.1).p_value < 0.001


def test_tost_holds_its_level_at_the_margin():
    """At the margin E = -M (A worse by exactly M) the lower test must reject at most alpha of the time."""
    rng = np.random.default_rng(7)
    n, margin, alpha, runs = 120, 0.1, 0.05, 3000
    p10, p01 = 0.05, 0.15  # E = -0.1, D = 0.2
    u = rng.random((runs, n))
    d = np.where(u < p10, 1.0, np.where(u < p10 + p01, -1.0, 0.0))
    outcomes, counts = np.unique(np.c_[(d > 0).sum(1), (d < 0).sum(1)], axis=0, return_counts=True)
    rejected = sum(  # one exact p-value per distinct (wins, losses): the runs repeat them
        int(c)
        for (w, ell), c in zip(outcomes, counts)
        if tost(np.r_[np.ones(w), -np.ones(ell), np.zeros(n - w - ell)], margin).p_lower <= alpha
    )
    # Clopper-Pearson lower bound of the rejection rate stays below alpha
    assert beta.ppf(0.025, rejected, runs - rejected + 1) < alpha


def test_tost_on_bounded_scores_reads_the_betting_e_process_at_the_margin():
    rng = np.random.default_rng(8)
    d = rng.choice([-0.5, 0.0, 0.5, 1.0, -1.0], size=150, p=[0.2, 0.5, 0.2, 0.05, 0.05])
    t = tost(d, 0.2, alpha=0.05, anytime=True)  # an early stop: the anytime test (fixed n: the t TOST, below)
    assert t.test == BETTING
    cs = IidBettingCS(1, 0.05, -1.0, 1.0, extra=(0.2, -0.2))
    for x in d:
        cs.update([0], [x])
    assert t.p_lower == pytest.approx(min(1.0, float(np.exp(-cs.log_e_above(-0.2)[0]))))
    assert t.p_upper == pytest.approx(min(1.0, float(np.exp(-cs.log_e_below(0.2)[0]))))
    assert t.p_value == max(t.p_lower, t.p_upper) and t.p_value < 0.05  # mean 0 on 150 items: within 0.2


def test_the_reports_lead_with_the_verdict_and_paste_as_markdown():
    a, b = _binary(100, 0.8, 0.4, 9)
    v = compare([PairedScores("arc_easy", "acc,none", a, b, True)], "qwen", "smol", margin=0.05)
    text = text_report(v, ["arc_easy: 2 items only in A's run: left out (--restrict); 98 items paired"])
    assert text.splitlines()[0].startswith("Verdict: qwen is better on 1 of 1 comparison")
    assert "80 % power" in text and "left out (--restrict)" in text
    md = markdown_report(v)
    assert md.startswith("**Verdict: qwen is better on 1 of 1") and "| task | metric |" in md
    assert "| arc\\_easy | acc,none |" in md or "| arc_easy | acc,none |" in md


def test_tost_on_bounded_scores_of_a_fixed_n_run_is_hall_corrected_t_and_statsmodels_when_symmetric():
    from scipy.stats import t as student_t
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(8)
    d = rng.choice([-0.5, 0.0, 0.5, 1.0, -1.0], size=150, p=[0.2, 0.5, 0.2, 0.05, 0.05])
    t = tost(d, 0.2)
    assert t.test == T_TOST
    # Hall's transform by hand
    n, sd = len(d), d.std(ddof=1)
    g = np.mean((d - d.mean()) ** 3) / sd**3
    for side, x in ((t.p_lower, d), (t.p_upper, -d)):
        s = (x.mean() + 0.2) / sd
        by_hand = student_t.sf(np.sqrt(n) * (s + g * s**2 / 3 + g**2 * s**3 / 27 + g / (6 * n)), n - 1)
        assert side == pytest.approx(by_hand, rel=1e-9)
        g = -g  # the upper side reads -d, whose skewness is -g
    assert t.p_value < 1e-4 and tost(d, 0.2, anytime=True).p_value > 10 * t.p_value  # anytime costs power
    symmetric = np.r_[d, -d]  # no skewness: Schuirmann's paired t TOST, as statsmodels computes it
    p, lower, upper = ttost_paired(symmetric, np.zeros_like(symmetric), -0.2, 0.2)
    got = tost(symmetric, 0.2)
    assert (got.p_lower, got.p_upper, got.p_value) == pytest.approx((lower[1], upper[1], p), rel=1e-6)
    few = np.r_[d[d != 0][:29], np.zeros(100)]  # 29 differing items: too few for the t approximation
    assert tost(few, 0.2).test == BETTING
