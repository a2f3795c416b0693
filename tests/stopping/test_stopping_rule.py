"""The anytime-valid stopping rules (sequential/stopping.py) on synthetic streams, with the very code an
Inspect eval runs: under the null, the share of streams that ever stop on a wrong claim stays within alpha
(Clopper-Pearson upper bound over many streams), and with a large true difference they stop early."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from safetyrepro.sequential.closed_testing import closed_test, closed_test_each
from safetyrepro.stopping import SequentialRule, StoppingRule

ALPHA = 0.05


def _upper(k: int, n: int, level: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen k times in n."""
    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def _first_claims(rule: StoppingRule, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """Feed (streams, steps) values one step at a time, as an eval feeds its samples; per stream its first
    claim, when it came and the bounds then (a stream that stopped takes no more values: it stopped)."""
    streams, steps = values.shape
    seq = SequentialRule(rule, streams)
    claim = np.full(streams, "", dtype=object)
    when = np.full(streams, steps + 1)
    lower, upper = np.full(streams, np.nan), np.full(streams, np.nan)
    active = np.arange(streams)
    for t in range(steps):
        if not len(active):
            break
        seq.update(active, values[active, t])
        d = seq.decide(active)
        new = active[d.stop]
        claim[new], when[new], lower[new], upper[new] = d.claim[d.stop], t + 1, d.lower[d.stop], d.upper[d.stop]
        active = active[~d.stop]
    return claim, when, lower, upper


def test_paired_rule_on_null_streams_stops_on_a_wrong_claim_within_alpha():
    rng = np.random.default_rng(11)
    streams, steps = 1500, 300
    values = rng.choice([-1.0, 0.0, 1.0], size=(streams, steps), p=[0.25, 0.5, 0.25])  # true difference 0
    claim, _, _, _ = _first_claims(StoppingRule("paired", ALPHA), values)
    wrong = int((claim != "").sum())  # every claim is wrong here: neither model is better
    assert _upper(wrong, streams) <= ALPHA, f"{wrong} of {streams} null streams stopped"


def test_paired_rule_with_a_margin_at_its_boundary_claims_within_margin_at_most_alpha():
    rng = np.random.default_rng(12)
    streams, steps, margin = 1500, 300, 0.2
    # the true difference is exactly the margin: "within +-margin" is a wrong claim
    values = rng.choice([-1.0, 0.0, 1.0], size=(streams, steps), p=[0.2, 0.4, 0.4])
    claim, _, _, _ = _first_claims(StoppingRule("paired", ALPHA, margin=margin), values)
    wrong = int((claim == "within_delta").sum()) + int((claim == "b_better").sum())
    assert _upper(wrong, streams) <= ALPHA, f"{wrong} of {streams} streams claimed wrongly"
    assert (claim == "a_better").sum() > 0.5 * streams  # the true claim (difference 0.2 > 0) is found


def test_mean_rule_intervals_at_the_stop_cover_the_true_mean_within_alpha():
    rng = np.random.default_rng(13)
    streams, steps, mean = 1000, 400, 0.3
    values = (rng.random((streams, steps)) < mean).astype(float)
    claim, when, lower, upper = _first_claims(StoppingRule("mean", ALPHA, width=0.2), values)
    stopped = claim == "known"
    assert stopped.all() and np.all(upper[stopped] - lower[stopped] <= 0.2 + 1e-12)
    missed = int(((lower > mean) | (upper < mean))[stopped].sum())
    assert _upper(missed, streams) <= ALPHA, f"{missed} of {streams} intervals at the stop missed {mean}"
    assert np.median(when) < steps  # it did stop before the end


def test_what_a_stop_of_the_mean_rule_means_holds_over_all_runs_and_given_a_rare_stop():
    """COVERAGE (rule.py), where stopping is rare (the audit's case: a width few runs reach within 700 samples):
    read at the stop, or at the end where the run never stopped, the intervals miss within alpha; among the runs
    that stopped, within alpha / P(stop)."""
    from safetyrepro.sequential.stopping import COVERAGE

    rng = np.random.default_rng(5)
    streams, steps, mean, width = 2000, 700, 0.9, 0.07
    values = (rng.random((streams, steps)) < mean).astype(float)
    rule = StoppingRule("mean", ALPHA, width=width)
    claim, _, lower, upper = _first_claims(rule, values)
    stopped = claim == "known"
    end = SequentialRule(rule, streams)
    for t in range(steps):
        end.update(np.arange(streams), values[:, t])
    last = end.decide()
    lo, hi = np.where(stopped, lower, last.lower), np.where(stopped, upper, last.upper)
    missed = (lo > mean) | (hi < mean)
    assert 0.1 < stopped.mean() < 0.5  # a stop that is neither sure nor rare to the point of nothing
    assert _upper(int(missed.sum()), streams) <= ALPHA * 1.5 and missed.mean() <= ALPHA
    p_stop = stopped.mean()
    assert missed[stopped].mean() <= ALPHA / p_stop
    assert "at most alpha / P(stop)" in COVERAGE["mean"]


def test_a_large_difference_stops_early():
    rng = np.random.default_rng(14)
    values = rng.choice([-1.0, 0.0, 1.0], size=(200, 240), p=[0.05, 0.35, 0.6])  # true difference 0.55
    claim, when, _, _ = _first_claims(StoppingRule("paired", ALPHA), values)
    assert (claim == "a_better").all() and np.median(when) < 40


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "mean"}, "needs a width"),
        ({"mode": "paired", "width": 0.1}, "width is for the mean rule"),
        ({"mode": "mean", "width": 0.1, "margin": 0.1}, "margin is for the paired rule"),
        ({"mode": "paired", "alpha": 1.5}, "alpha 1.5"),
        ({"mode": "median"}, "one of mean, paired"),
    ],
)
def test_bad_rules_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StoppingRule(**kwargs)


def test_values_outside_the_range_are_refused():
    seq = SequentialRule(StoppingRule("mean", width=0.1))
    with pytest.raises(ValueError, match=r"value 1.5 is outside \[0, 1\]"):
        seq.update([0], [1.5])


def test_each_stream_its_own_closed_test():
    rng = np.random.default_rng(15)
    p = np.minimum(1.0, rng.exponential(0.05, size=(400, 4)))
    each = closed_test_each(p, ALPHA)
    assert each.any() and not each.all()
    for row, mine in zip(p, each, strict=True):
        assert (closed_test(row[None, :], ALPHA)[0] == mine).all()
