"""The control-variate e-processes (sequential/control_variate.py, issue 45): plain steps are the plain e-process,
partner steps keep the null's mean exactly, Ville's bound holds on null streams that use partners, the
control helps where D and C correlate, and the ceiling any control variate can reach."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.stats import beta

from safetyrepro.sequential import control_variate as cv
from safetyrepro.sequential.confidence_sequence import IidBettingCS


def upper_share(k: int, n: int, level: float = 0.95) -> float:
    """Clopper-Pearson: the lower end of the two-sided interval for a share k of n."""
    return float(beta.ppf((1 - level) / 2, k, n - k + 1)) if k else 0.0


def correlated(rng, streams: int, steps: int, theta: float, tie: float, k: int = cv.K_PARTNERS):
    """Paired differences of two 0/1 models (a at 0.5 + theta / 2, b at 0.5 - theta / 2 on average), the costly D
    equal to the cheap C with probability `tie` per model, and fresh cheap partner differences."""
    pa, pb = 0.5 + theta / 2, 0.5 - theta / 2

    def diff(shape):
        return (rng.random(shape) < pa).astype(float) - (rng.random(shape) < pb)

    c = diff((streams, steps))
    fresh = diff((streams, steps))
    d = np.where(rng.random((streams, steps)) < tie, c, fresh)
    return d, c, diff((streams, steps, k))


def run(cs, d, c, partners):
    """Feed every stream step by step, with partners on every step after the warm-up (any choice fixed by the
    past is valid; this one uses them most)."""
    streams = np.arange(len(d))
    for t in range(d.shape[1]):
        p = partners[:, t] if t >= cv.WARM_UP else None
        cs.update(streams, d[:, t], c[:, t], p)
    return cs


def test_plain_steps_are_the_plain_e_process():
    """With no partners (no correlation asked for), every candidate's capital is IidBettingCS's to 1e-12."""
    rng = np.random.default_rng(0)
    d = rng.choice([-1.0, -0.4, 0.0, 0.6, 1.0], size=(3, 70))
    plain = IidBettingCS(3, 0.01, extra=(0.0, 0.05, -0.05))
    ours = cv.ControlledBettingCS(3, 0.01, extra=(0.0, 0.05, -0.05))
    for t in range(70):
        plain.update(np.arange(3), d[:, t])
        ours.update(np.arange(3), d[:, t], np.zeros(3))
    for x in (0.0, 0.05, -0.05, 0.3):
        assert ours.log_e_above(x) == pytest.approx(plain.log_e_above(x), abs=1e-12)
        assert ours.log_e_below(x) == pytest.approx(plain.log_e_below(x), abs=1e-12)
    for a, b in zip(ours.bounds(0.01), plain.bounds(0.01), strict=True):
        assert a == pytest.approx(b, abs=1e-12)


def test_the_control_term_has_mean_zero_for_any_law_of_the_cheap_score():
    """g = mean of clip(C - C'_q, -1, 1): exactly 0 in expectation when C and the partners are i.i.d., worked out
    over every outcome of a skewed law on seed-mean values."""
    values = np.array([-1.0, -0.6, 0.2, 1.0])
    law = np.array([0.1, 0.2, 0.3, 0.4])
    mean = 0.0
    for idx in itertools.product(range(4), repeat=1 + cv.K_PARTNERS):
        g = cv.control_term(values[[idx[0]]], values[list(idx[1:])][None, :])[0]
        mean += np.prod(law[list(idx)]) * g
    assert mean == pytest.approx(0.0, abs=1e-15)
    assert cv.control_term(np.array([1.0]), np.array([[-1.0, 0.5]]))[0] == pytest.approx((1.0 + 0.5) / 2)


def test_partners_are_asked_for_only_after_the_warm_up_with_correlation_and_room():
    rng = np.random.default_rng(1)
    d, c, p = correlated(rng, 2, 30, 0.4, 0.9)
    cs = cv.ControlledBettingCS(2, 0.05)
    s = np.arange(2)
    for t in range(cv.WARM_UP):
        assert not (cs.partners_wanted(s, np.full(2, 300)) > 0).any()
        cs.update(s, d[:, t], c[:, t])
    assert (cs.partners_wanted(s, np.full(2, 300)) > 0).all()  # r^2 about 0.8
    assert not (cs.partners_wanted(s, np.full(2, cv.K_PARTNERS)) > 0).any()  # no room for a partner step
    flat = cv.ControlledBettingCS(1, 0.05)
    for t in range(30):  # C independent of D: r^2 stays small
        flat.update([0], [d[0, t]], [rng.choice([-1.0, 0.0, 1.0])])
    assert flat.r2([0])[0] < cv.MIN_R2 and not flat.partners_wanted([0], [300])[0] > 0
    with pytest.raises(ValueError, match="warm-up"):
        cv.ControlledBettingCS(1, 0.05).update([0], [0.0], [0.0], [[0.0] * cv.K_PARTNERS])


@pytest.mark.parametrize("beyond", [0, 20_000])
def test_null_streams_that_take_partners_cross_at_most_alpha_of_the_time(beyond):
    """Ville: 3,000 streams with theta = 0 exactly and D tied to C (r about 0.9), partners on every step after the
    warm-up (2 a step from the subset's back; 16 from a pool beyond it): the share whose e-process against
    theta <= 0 ever reaches 1 / alpha is at most alpha (binomial interval)."""
    rng = np.random.default_rng(7)
    d, c, p = correlated(rng, 3000, 150, 0.0, 0.9, k=cv.partners_per_step(beyond))
    cs = run(cv.ControlledBettingCS(3000, 0.1, grid_points=21, beyond=beyond), d, c, p)
    crossed = int((cs.log_e_above(0.0) >= np.log(1 / 0.1)).sum())
    assert upper_share(crossed, 3000) <= 0.1, crossed
    assert (cs.partner_steps == 150 - cv.WARM_UP).all()


def test_partners_come_from_the_pool_beyond_the_subset_spread_over_the_claim_and_sparingly_from_its_back():
    """With a pool beyond the subset a step takes up to 16 partners, spread over the steps the claim is expected to
    need (fewer when the pool left is short, never more than it holds); from the subset's own back at most 2 a
    step and 50 items in all (2.5 % of the subset where that is fewer), and only where the steps fit the items
    left."""
    assert [cv.partners_per_step(n) for n in (0, 1, 20_000)] == [2, 16, 16]
    rng = np.random.default_rng(1)
    d, c, _ = correlated(rng, 3, 40, 0.4, 0.9)
    cs = cv.ControlledBettingCS(3, 0.05 / 96, beyond=10_000)
    s = np.arange(3)
    for t in range(40):
        cs.update(s, d[:, t], c[:, t])
    wide = cs.partners_wanted(s, np.full(3, 300), np.full(3, 10_000))
    assert (wide == 16).all()
    short = cs.partners_wanted(s, np.full(3, 300), np.array([10, 3, 0]))
    assert 1 <= short[0] <= 10 and 1 <= short[1] <= 3 and short[2] in (0, 1, 2)  # the third: the subset's back
    cs.partner_items_back[:] = cv.MIN_PARTNER_ITEMS - 1
    assert (cs.partners_wanted(s, np.full(3, 300)) <= 1).all()  # the back's 50 items are nearly spent
    assert [cv.ControlledBettingCS(1, 0.05, subset=n).back_cap for n in (300, 1000, 2000, 20_000)] == [7, 25, 50, 50]
    small = cv.ControlledBettingCS(3, 0.05 / 96, subset=300)  # 2.5 % of a 300-item subset: 7 back items
    for t in range(40):
        small.update(s, d[:, t], c[:, t])
    assert (small.partners_wanted(s, np.full(3, 300)) > 0).any()
    small.partner_items_back[:] = 7
    assert not (small.partners_wanted(s, np.full(3, 300)) > 0).any()
    with pytest.raises(ValueError, match="items beyond the subset"):
        cv.ControlledBettingCS(1, 0.05, beyond=-1)


def test_partners_are_not_asked_for_where_a_plain_step_grows_faster():
    """_partners_pay, worked by hand at 100 steps, r^2 0.64, 16 partners, gamma 0.75 (range 1.75 a side, cap
    0.9 / 1.75 = 0.514). A 0.35 lead with variance 0.1 (five-seed means): theta = 0.35 - sqrt(0.001) = 0.318; the
    plain Kelly stake 0.318 / 0.201 = 1.58 is capped at 0.9, growth 0.9 x 0.318 - 0.81 x 0.201 / 2 = 0.205; with
    partners the variance is 0.1 (1 - 0.64 x 16 / 17) = 0.040, the stake 2.26 capped at 0.514, growth 0.164 -
    0.264 x 0.141 / 2 = 0.145: plain. A 0.15 lead with variance 0.5 (0/1 answers): theta = 0.079, neither stake
    capped (0.157 and 0.387), growth theta^2 / 2 (V + theta^2) = 0.0062 plain against 0.0153: partners. With no
    partner (k = 0) the partners' step is the plain one and never pays."""
    pays = cv._partners_pay(
        np.array([0.35, 0.15, 0.15]), np.array([0.1, 0.5, 0.5]), 0.64, 100, np.array([16, 16, 0]), 0.75
    )
    assert pays.tolist() == [False, True, False]
    rng = np.random.default_rng(2)
    d, c, _ = correlated(rng, 2, 60, 0.0, 0.9)
    d[0] = np.where(rng.random(60) < 0.7, 0.6, np.where(rng.random(60) < 0.5, 0.0, -0.2))  # five-seed means, far ahead
    c[0] = np.where(d[0] > 0, 1.0, np.where(rng.random(60) < 0.5, 0.0, -1.0))
    cs = cv.ControlledBettingCS(2, 0.05 / 96, beyond=10_000)
    for t in range(60):
        cs.update(np.arange(2), d[:, t], c[:, t])
    assert cs.r2([0])[0] > cv.MIN_R2
    assert cs.partners_wanted(np.arange(2), np.full(2, 300), np.full(2, 10_000)).tolist() == [0, 16]


def test_with_costs_a_step_takes_the_partners_that_leave_the_least_model_time():
    """`--control time`: (1 + rho (1 + k)) x the steps still needed with k partners, least over k = 0..16. With the
    steps at 100 (0.36 + 0.64 / (k + 1)) (r = 0.8, 100 plain steps) and a twin item at a tenth of a costly one:
    k = 2, 3, 4 cost 1.3 x 57.3 = 74.5, 1.4 x 52 = 72.8 and 1.5 x 48.8 = 73.2, so 3; free twins take all 16,
    an unknown cost (NaN) leaves the cap where it was, and twins far dearer than the item take none. On streams
    of a 0.1 lead: free twins 16, a twin 100 times the costly item none (r^2 0.55 there: one partner cuts the
    steps to 0.62, for twice the cost), an unknown cost 16."""
    cs = cv.ControlledBettingCS(4, 0.05 / 96, beyond=10_000)
    need = lambda k: np.full(4, 100 * (0.36 + 0.64 / (k + 1)))  # noqa: E731
    assert cs._cheapest_k(np.array([0.1, 0.0, np.nan, 10.0]), need).tolist() == [3, 16, 16, 0]
    rng = np.random.default_rng(1)
    d, c, _ = correlated(rng, 3, 40, 0.1, 0.9)  # a small lead: hundreds of steps to go
    cs = cv.ControlledBettingCS(3, 0.05 / 96, beyond=10_000)
    s = np.arange(3)
    for t in range(40):
        cs.update(s, d[:, t], c[:, t])
    pool = np.full(3, 10_000)
    assert cs.partners_wanted(s, np.full(3, 300), pool, np.array([0.0, 100.0, np.nan])).tolist() == [16, 0, 16]
    fewer = cs.partners_wanted(s, np.full(3, 300), pool, np.full(3, 0.1))
    assert (1 <= fewer).all() and (fewer < 16).all()


def test_the_control_decides_sooner_where_d_and_c_correlate_and_never_later_where_they_do_not():
    """Same data both ways, 400 streams, theta = 0.3, at certify's usual first step (0.05 / 96): tied at 0.9 the
    control's e-process crosses sooner on average (streams that cross both ways); independent, it takes plain
    steps (partners only where a chance r^2 asks for them) and crosses when the plain one does, within 2 %."""

    def first_crossing(cs_log_e):
        hit = cs_log_e >= np.log(96 / 0.05)
        return np.where(hit.any(axis=1), hit.argmax(axis=1), -1)

    rng = np.random.default_rng(3)
    for tie in (0.9, 0.0):
        d, c, p = correlated(rng, 400, 250, 0.3, tie, k=16)
        plain = cv.ControlledBettingCS(400, 0.05 / 96, grid_points=21)
        ours = cv.ControlledBettingCS(400, 0.05 / 96, grid_points=21, beyond=10**6)
        traces_plain, traces_ours = [], []
        streams = np.arange(400)
        for t in range(250):
            plain.update(streams, d[:, t], c[:, t])
            k = ours.partners_wanted(streams, np.full(400, 10_000), np.full(400, 10**6))
            ours.update(streams, d[:, t], c[:, t], np.where(np.arange(16)[None, :] < k[:, None], p[:, t], np.nan))
            traces_plain.append(plain.log_e_above(0.0).copy())
            traces_ours.append(ours.log_e_above(0.0).copy())
        n_plain = first_crossing(np.array(traces_plain).T)
        n_ours = first_crossing(np.array(traces_ours).T)
        both = (n_plain >= 0) & (n_ours >= 0)
        assert (n_ours < 0).sum() <= (n_plain < 0).sum() + 2
        if tie:
            assert n_ours[both].mean() < 0.9 * n_plain[both].mean(), (n_ours[both].mean(), n_plain[both].mean())
        else:
            assert ours.partner_steps.mean() < 1 and n_ours[both].mean() <= 1.02 * n_plain[both].mean()


def test_the_ceiling_of_any_control_variate():
    """growth_ceiling: the plain rate is the bounded-mean KL-inf (checked by a scalar search), knowing C can only
    add, an uninformative C adds nothing, and at r = 0.8 with 0/1 answers 0.75 against 0.40 no e-process on
    (D, C) grows 2x faster than the plain one (about 1.55x): half the costly items is out of reach there."""
    d = np.array([-1.0, 0.0, 1.0, -1.0, 0.0, 1.0])
    c = np.array([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])
    w = np.array([0.05, 0.2, 0.25, 0.05, 0.2, 0.25])  # D independent of C
    plain, with_c = cv.growth_ceiling(d, c, w)
    check = -minimize_scalar(lambda lam: -(w @ np.log1p(lam * d)), bounds=(0, 1 - 1e-9), method="bounded").fun
    assert plain == pytest.approx(check, rel=1e-6) and with_c == pytest.approx(plain, rel=1e-4)

    def law(pa, pb, tie):  # each model's free-form answer is its log-probability answer w.p. tie, else fresh
        pts = []
        for la, fa, lb, fb in itertools.product((0, 1), repeat=4):
            wa = (pa if la else 1 - pa) * (tie * (fa == la) + (1 - tie) * (pa if fa else 1 - pa))
            wb = (pb if lb else 1 - pb) * (tie * (fb == lb) + (1 - tie) * (pb if fb else 1 - pb))
            pts.append((fa - fb, la - lb, wa * wb))
        return np.array(pts).T

    plain, with_c = cv.growth_ceiling(*law(0.75, 0.40, 0.8))
    assert 1.4 < with_c / plain < 1.7
    plain, with_c = cv.growth_ceiling(*law(0.65, 0.50, 0.8))
    assert 2.0 < with_c / plain < 2.6  # small differences (hundreds of items) leave room for more


def test_five_seed_means_leave_a_twin_too_little_to_halve_the_costly_items_at_a_015_lead():
    """Sampled configurations (the mean of five seeds, each seed's answer the twin's with probability 0.51, else
    fresh: r = 0.8 as for greedy at 0.8) at 0.65 against 0.50: no e-process on (D, C) grows 2x faster than the
    plain one (about 1.66x, a least share of 0.60, docs/methods/certify.md), where greedy answers allow 2.29x. The
    law is enumerated seed by seed here (perf/certify_control.py _joint sums it binomially: the same numbers)."""
    import sys
    from pathlib import Path

    def model(p, tie):  # (seed mean, log-probability answer) -> probability, over all 2^6 outcomes
        out: dict[tuple[float, int], float] = {}
        for lp, *seeds in itertools.product((0, 1), repeat=6):
            w = p if lp else 1 - p
            for s in seeds:
                right = tie * lp + (1 - tie) * p
                w *= right if s else 1 - right
            key = (sum(seeds) / 5, lp)
            out[key] = out.get(key, 0.0) + w
        return out

    pts = [
        (fa - fb, la - lb, wa * wb)
        for (fa, la), wa in model(0.65, 0.51).items()
        for (fb, lb), wb in model(0.5, 0.51).items()
    ]
    d, c, w = np.array(pts).T
    r = np.cov(d, c, aweights=w)[0, 1] / np.sqrt(np.cov(d, aweights=w) * np.cov(c, aweights=w))
    assert r == pytest.approx(0.80, abs=0.01)
    plain, with_c = cv.growth_ceiling(d, c, w)
    assert plain == pytest.approx(0.0540, abs=2e-4) and with_c / plain == pytest.approx(1.66, abs=0.02)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf"))
    from certify_control import _joint

    assert cv.growth_ceiling(*_joint(0.65, 0.5, 0.51, 5)) == pytest.approx((plain, with_c), rel=1e-6)
