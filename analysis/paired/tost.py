"""Equivalence at a margin (TOST): are two models' paired scores within M of each other, as a claim about the
models (the items as draws from the task)?

Two one-sided tests, each at level alpha: H0- "E <= -M" and H0+ "E >= M", E the true mean paired
difference A - B. Both rejected: |E| < M (the intersection-union test, Berger 1982: no alpha is split). The
TOST p-value is the larger of the two.

0/1 item scores (differences in {-1, 0, 1}): an exact unconditional test that counts the tied items (issue 53:
the former test, binomial on the discordant items only, gave p = 1 to every all-tied run of 50 to 134 items).
The counts (W won by A, L won by B, ties) are multinomial; E = P(A wins) - P(B wins) and the discordance
D = P(A wins) + P(B wins) is a nuisance. The outcomes are ordered by Tango's score statistic for H0: E = -M
(the difference W - L + nM over its standard error at the restricted maximum-likelihood fit), and the p-value
is the chance of a score at least as large, maximised over every D the null allows (D >= M) at E = -M:

    p- = sup_{D in [M, 1]} sum_m Bin(m; n, D) P(Bin(m, (1 - M/D)/2) >= t_m),

t_m the fewest A-wins among m discordant items whose score reaches the observed one (the score grows with W at
fixed m). Within the null (E < -M) each discordant item goes to A less often, so the boundary E = -M is the
worst case and the test holds its level whatever D is. H0+ is the same test with A and B swapped. All tied:
p = (1 - M)^n for n up to about 2 / M (0.0485 at 59 items, M = 0.05); 0.0138 at 100.

Other bounded scores (epoch means, partial credit), fixed n: the paired t TOST (Schuirmann 1987) on the item
differences with Hall's skewness correction (t_tost_p_values), when at least MIN_T_DIFFERING items differ; its
size at the margin on five-seed means and on skewed differences is checked by simulation in
tests/analysis/test_detectable_and_tost_53.py. With fewer differing items, or for a run whose
item count was chosen by looking at the data (an early stop: `anytime=True`), each side is the anytime p-value
of the betting e-process that `certify` and the early-stopping manager use (confidence_sequence.IidBettingCS),
fed the items in a fixed order: valid for any distribution on [-1, 1] and any stopping rule, conservative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import binom
from scipy.stats import t as student_t

from safetyrepro.sequential.confidence_sequence import IidBettingCS

MIN_T_DIFFERING = 30  # fewer differing items: the t TOST's normal approximation is not trusted
VECTOR_ITEMS = 1000  # up to this many items, every discordance of the grid is evaluated at once
D_GRID = 257  # discordances evaluated before the sup is refined locally (denser near D = M)
EXACT = "exact unconditional score test at the margin (ties counted; p-value maximised over the discordance)"
T_TOST = "paired t TOST at the margin, skewness-corrected (Hall 1992; fixed item count)"
BETTING = "betting e-process at the margin (anytime p-values, confidence_sequence.IidBettingCS; conservative)"


@dataclass(frozen=True)
class Tost:
    margin: float
    p_lower: float  # H0: E <= -margin
    p_upper: float  # H0: E >= margin
    test: str

    @property
    def p_value(self) -> float:
        return max(self.p_lower, self.p_upper)


def is_binary(differences: np.ndarray) -> bool:
    """The paired differences of 0/1 item scores: every one in {-1, 0, 1}."""
    return bool(np.all(np.isin(differences, (-1.0, 0.0, 1.0))))


def tost(differences, margin: float, alpha: float = 0.05, anytime: bool = False) -> Tost:
    """Both one-sided tests of |E| < margin on one comparison's paired differences A - B (in [-1, 1]).
    `anytime`: the item count was not fixed in advance (an early stop), so bounded scores read the betting
    e-process; `alpha` tunes only its stakes (the e-process is valid at every level)."""
    d = np.asarray(differences, dtype=float)
    if not 0 < margin < 1:
        raise ValueError(f"margin {margin} must be in (0, 1)")
    if len(d) == 0:
        return Tost(margin, 1.0, 1.0, EXACT)
    if is_binary(d):
        return _exact(d, margin)
    if anytime or np.count_nonzero(d) < MIN_T_DIFFERING:
        return _betting(d, margin, alpha)
    return _t_tost(d, margin)


# -- 0/1 scores: exact unconditional ---------------------------------------------------------------
def score_statistic(wins, losses, n: int, margin: float) -> np.ndarray:
    """Tango's score statistic for H0: E = -margin (large: E > -margin), W wins of A and L of B among n items.
    The restricted fit of P(B wins), q, is the larger root of 2n q^2 - B q - L e(1 - e) = 0 with e = -margin
    and B = W(1 + e) + L(1 - e) - 2n e; the variance of one item's difference there is 2q + e(1 - e)."""
    w, ell, e = np.asarray(wins, dtype=float), np.asarray(losses, dtype=float), -margin
    b = w * (1 + e) + ell * (1 - e) - 2 * n * e
    q = (b + np.sqrt(np.maximum(b * b + 8 * n * ell * e * (1 - e), 0.0))) / (4 * n)
    variance = n * np.maximum(2 * q + e * (1 - e), 1e-300)  # > 0 for margin < 1; the floor guards rounding
    return (w - ell - n * e) / np.sqrt(variance)


def thresholds(n: int, margin: float, z: float) -> tuple[np.ndarray, np.ndarray]:
    """(m, t_m) for m = 0..n: the fewest A-wins among m discordant items whose score reaches z (m + 1: none),
    by bisection in every m at once (the score grows with the A-wins at fixed m)."""
    m = np.arange(n + 1)
    lo, hi = np.zeros(n + 1, dtype=np.int64), m + 1
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        reached = score_statistic(mid, m - mid, n, margin) >= z
        open_ = lo < hi
        hi = np.where(open_ & reached, mid, hi)
        lo = np.where(open_ & ~reached, mid + 1, lo)
    return m, lo


def region_probability(n: int, margin: float, m: np.ndarray, t: np.ndarray, discordance: float) -> float:
    """P(W >= t_M) at E = -margin and discordance D: M ~ Bin(n, D), W | M ~ Bin(M, (1 - margin / D) / 2)."""
    p = max(0.0, (1 - margin / discordance) / 2)
    # only M within 10 standard deviations + 40 of nD (the rest weighs below 4e-22: power.py's window)
    sd = np.sqrt(n * discordance * (1 - discordance))
    lo = max(0, int(n * discordance - 10 * sd - 40))
    hi = min(n, int(np.ceil(n * discordance + 10 * sd + 40)))
    keep = slice(lo, hi + 1)
    return float(binom.pmf(m[keep], n, discordance) @ binom.sf(t[keep] - 1, m[keep], p))


def exact_one_sided(wins: int, losses: int, n: int, margin: float) -> float:
    """The exact unconditional p-value against H0: E <= -margin (see the module docstring)."""
    m, t = thresholds(n, margin, float(score_statistic(wins, losses, n, margin)))

    def many(ds: np.ndarray) -> np.ndarray:
        if n > VECTOR_ITEMS:  # one discordance at a time, each on its window of M: bounded memory
            return np.array([region_probability(n, margin, m, t, x) for x in ds])
        p = np.maximum(0.0, (1 - margin / ds) / 2)[:, None]
        return (binom.pmf(m[None, :], n, ds[:, None]) * binom.sf(t[None, :] - 1, m[None, :], p)).sum(axis=1)

    return sup_over_discordance(many, margin)


def sup_over_discordance(prob, margin: float) -> float:
    """sup over D in [margin, 1] of prob(D), `prob` taking an array of D: a grid denser near D = margin (where the
    all-tied outcomes weigh most), then a bounded local search around the best grid point (the sup, not a grid
    value, keeps the level)."""
    grid = margin + (1 - margin) * np.linspace(0.0, 1.0, D_GRID) ** 2
    values = np.asarray(prob(grid), dtype=float)
    i = int(np.argmax(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    best = float(values[i])
    if hi > lo:
        found = minimize_scalar(
            lambda x: -float(prob(np.array([x]))[0]), bounds=(lo, hi), method="bounded", options={"xatol": 1e-9}
        )
        best = max(best, -float(found.fun))
    return min(1.0, best)


def _exact(d: np.ndarray, margin: float) -> Tost:
    wins, losses, n = int((d > 0).sum()), int((d < 0).sum()), len(d)
    return Tost(margin, exact_one_sided(wins, losses, n, margin), exact_one_sided(losses, wins, n, margin), EXACT)


# -- other bounded scores ----------------------------------------------------------------------------
def t_tost_p_values(d: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """The skewness-corrected paired t TOST's one-sided p-values (lower: against E <= -M; upper: against
    E >= M) of each row of `d` (items along the last axis; vectorised for the size simulation too).

    Hall's (1992) monotone cubic transform of the t statistic, T = sqrt(n) (S + g S^2 / 3 + g^2 S^3 / 27 +
    g / (6n)), S = (mean + M) / sd, g the sample skewness, read on Student's t with n - 1 degrees of freedom:
    the plain t TOST rejected 7 % of the time at the margin on 200 left-skewed items (8 % of them -1, the rest
    +0.2 or 0); this one stays within the simulation's error of 5 % there and on five-seed means."""
    d = np.atleast_2d(np.asarray(d, dtype=float))
    return _hall_lower(d, margin), _hall_lower(-d, margin)


def _hall_lower(d: np.ndarray, margin: float) -> np.ndarray:
    n = d.shape[-1]
    mean, sd = d.mean(-1), d.std(-1, ddof=1)
    third = ((d - mean[..., None]) ** 3).mean(-1)
    spread = sd > 0
    safe = np.where(spread, sd, 1.0)
    g = np.where(spread, third / safe**3, 0.0)
    s = (mean + margin) / safe
    hall = np.sqrt(n) * (s + g * s**2 / 3 + g**2 * s**3 / 27 + g / (6 * n))
    # no spread: every item differs by the same amount, within the margin or not
    return np.where(spread, student_t.sf(hall, n - 1), np.where(mean > -margin, 0.0, 1.0))


def _t_tost(d: np.ndarray, margin: float) -> Tost:
    lower, upper = t_tost_p_values(d, margin)
    return Tost(margin, float(lower[0]), float(upper[0]), T_TOST)


def _betting(d: np.ndarray, margin: float, alpha: float) -> Tost:
    cs = IidBettingCS(1, alpha, -1.0, 1.0, extra=(margin, -margin))
    for value in d:
        cs.update([0], [value])
    p_lower = float(min(1.0, np.exp(-cs.log_e_above(-margin)[0])))  # against "E <= -M"
    p_upper = float(min(1.0, np.exp(-cs.log_e_below(margin)[0])))  # against "E >= M"
    return Tost(margin, p_lower, p_upper, BETTING)
