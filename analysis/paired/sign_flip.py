"""The exact paired sign-flip test over items, the one every paired comparison runs (analyze's item tests,
`verdict`, the content reading): under the null that the two models are exchangeable on every item, each
item's difference d_i is as likely to be +|d_i| as -|d_i|, and the p-value of the observed sum is read off
the exact law of sum(+-|d_i|). For 0/1 item scores this is the exact McNemar test on the discordant items;
seed-averaged item scores (multiples of 1/5) are handled exactly on their lattice (exact.py)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import beta, binom, norm

from safetyrepro.grid.exact import as_integers, lattice_of

FALLBACK_LATTICE = 1000  # differences on no small lattice are rounded to 0.001 (the test stays exact for them)


def exact_mean(values: np.ndarray) -> float:
    """The mean of item scores (or differences) on their lattice, summed as whole numbers: a sum that
    is 0 as a fraction is 0.0, never 1e-17."""
    ints, lattice = as_integers(values)
    return float(ints.sum() / (len(ints) * lattice)) if len(ints) else float("nan")


def integer_weights(magnitudes: np.ndarray) -> np.ndarray:
    """|d_i| as whole numbers on the smallest lattice 1/L that holds them all (exact.lattice_of, within 1e-6
    of a step: differences of snapped item scores carry float noise only); otherwise rounded to multiples
    of 1/FALLBACK_LATTICE."""
    lattice = lattice_of(magnitudes, tolerance=1e-6)
    return np.rint(magnitudes * (lattice or FALLBACK_LATTICE)).astype(np.int64)


@lru_cache(maxsize=4096)
def _fair_binomial(n: int) -> np.ndarray:
    """P(K = k) for K ~ Binomial(n, 1/2), k = 0..n (cached: the same n recurs across configurations)."""
    law = binom.pmf(np.arange(n + 1), n, 0.5)
    law.setflags(write=False)
    return law


def subset_sum_law(weights: np.ndarray, p: float = 0.5) -> np.ndarray:
    """Law of U = sum of w_i over a random subset (each item in with probability p, 1/2 under the
    test's null; power.detectable_from_differences reads other p): index u -> P(U = u)."""
    law = np.ones(1)
    values, counts = np.unique(weights, return_counts=True)
    if len(values) > 1 and int(weights.sum()) * len(values) > BALANCED_ABOVE:
        return balanced_law(values, counts, p)
    for v, c in zip(values, counts, strict=True):
        counts_law = _fair_binomial(int(c)) if p == 0.5 else binom.pmf(np.arange(int(c) + 1), int(c), p)
        if len(values) == 1 and v == 1:
            return counts_law  # 0/1 items: U is the number of discordant items won, Bin(c, p)
        part = np.zeros(v * c + 1)
        part[::v] = counts_law
        law = _convolve(law, part)
    return law


BALANCED_ABOVE = 50_000_000  # total weight x distinct weights: above it, one law after another takes minutes


def _convolve(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if len(x) * len(y) > 4_000_000:
        from scipy.signal import fftconvolve  # lazy: scipy.signal takes a second to import; long item lists only

        return np.clip(fftconvolve(x, y), 0.0, None)
    return np.convolve(x, y)


def balanced_law(values: np.ndarray, counts: np.ndarray, p: float) -> np.ndarray:
    """The same law as `subset_sum_law`'s loop, for many distinct weights (fractional scores on the 1/1000
    lattice: hundreds): the shortest two laws are convolved first, so each value of the total is carried
    through ~log2(distinct) convolutions, not through one per distinct weight (4,000 items: ~1 s, not ~100)."""

    heap = []
    for i, (v, c) in enumerate(zip(values, counts, strict=True)):
        part = np.zeros(int(v) * int(c) + 1)
        part[:: int(v)] = _fair_binomial(int(c)) if p == 0.5 else binom.pmf(np.arange(int(c) + 1), int(c), p)
        heap.append((len(part), i, part))
    heapq.heapify(heap)
    order = len(heap)  # ties in length are broken by creation order: the same laws, the same result
    while len(heap) > 1:
        (_, _, x), (_, _, y) = heapq.heappop(heap), heapq.heappop(heap)
        law = _convolve(x, y)
        heapq.heappush(heap, (len(law), order, law))
        order += 1
    return heap[0][2]


def sign_flip_p_value(differences) -> float:
    """Two-sided exact p-value of sum(d_i) under random signs: P(|sum(+-|d_i|)| >= |sum(d_i)|).
    For 0/1 scores this is the exact McNemar (binomial) test on the items where the models differ."""
    d = np.asarray(differences, dtype=float)
    d = d[d != 0]
    if len(d) == 0:
        return 1.0
    w = integer_weights(np.abs(d))
    keep = w > 0
    w, positive = w[keep], d[keep] > 0
    total = int(w.sum())
    if total == 0:
        return 1.0
    law = subset_sum_law(w)  # sum(d) = 2U - total, with U the weight of the positive items
    observed = abs(2 * int(w[positive].sum()) - total)
    extreme = np.abs(2 * np.arange(total + 1) - total) >= observed
    return float(min(1.0, law[extreme].sum()))


# --- intervals that invert the test beside them (issue 53) -------------------------------------------------------
#
# `verdict` prints, beside each exact paired test, an interval for the paired difference Delta = E[A - B]. It is
# built from the same test, at the same (Holm) level, so that it never says "excludes 0" where the test says
# "not confirmed", and never has zero width where the test says nothing:
# - 0/1 item scores (every d_i in {-1, 0, 1}): Delta = p10 - p01 = (2 psi - 1) pi, with pi = P(discordant) and
#   psi = P(A wins | discordant). Clopper-Pearson for psi (b of the m discordant items) and for pi (m of n), each
#   at level 1 - alpha/2 (Bonferroni: both hold with probability >= 1 - alpha), and Delta's interval is the range
#   of (2 psi - 1) pi over that box. The exact McNemar p-value is the central Clopper-Pearson inversion at
#   psi = 1/2, so the interval excludes 0 only where psi's excludes 1/2, that is only where p <= alpha/2.
# - other scores in [-1, 1]: the inverted sign-flip test, {delta : the test on d_i - delta is not rejected}, its
#   bounds found by bisection on each side of the mean, each p-value from the same exact law as the test's
#   (sign_flip_p_value); above EXACT_INTERVAL_ITEMS items (where each exact law takes 0.1 s or more on partial
#   credit) the ends are the closed form of the law's normal approximation, and the row's exact decision only
#   places 0. The test is exact under "d_i - delta is symmetric about 0"; for the mean of skewed differences it
#   is close to its level (simulated: 5.0 % misses at 12 items, 4.7 % at 300, tests/analysis/
#   test_intervals_invert_tests.py).
# - every d_i equal, not 0/1 (the sign-flip model then gives no width): Hoeffding's interval for a mean of
#   values in [-1, 1], half-width sqrt(2 ln(2/alpha) / n). Chosen over the betting interval at fixed n
#   (confidence_sequence.py) because it is closed-form, valid at every n for any bounded law, and does not use
#   the (here zero) spread, which is exactly what must not make it narrow; it is widened to reach 0 where the
#   test does not reject.

EXACT_INTERVAL_ITEMS = 100  # above: the bisection reads the normal approximation of the sign-flip law
BISECTION_STEP = 5e-4  # the bounds are found to half the third decimal a table prints
MCNEMAR_INTERVAL = "exact (Clopper-Pearson on the discordant items, 0/1 scores)"
SIGN_FLIP_INTERVAL = "exact (the sign-flip test inverted)"
SIGN_FLIP_NORMAL_INTERVAL = "the sign-flip test inverted (its law's normal approximation above 100 items)"
HOEFFDING_INTERVAL = "Hoeffding (every difference equal: the sign-flip test has no width)"


@dataclass(frozen=True)
class Interval:
    """An interval for the mean paired difference, at confidence 1 - alpha, by `method`."""

    low: float
    high: float
    alpha: float  # this row's level: alpha, or its Holm level (holm_levels)
    method: str

    @property
    def confidence(self) -> float:
        return 1.0 - self.alpha


def is_zero_one(differences: np.ndarray) -> bool:
    """Paired differences of 0/1 item scores: every one in {-1, 0, 1}."""
    return bool(np.all(np.isin(differences, (-1.0, 0.0, 1.0))))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval at level 1 - alpha for a binomial share, k of n ([0, 1] for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def mcnemar_interval(wins_a: int, wins_b: int, n: int, alpha: float) -> tuple[float, float]:
    """Delta = p10 - p01 = (2 psi - 1) pi over the box psi x pi of two Clopper-Pearson intervals at 1 - alpha/2.
    (2 psi - 1) pi is increasing in psi and linear in pi, so its range over the box is read at the corners.

    Agreement with the exact McNemar test (p = sign_flip_p_value, the two-sided binomial test of psi = 1/2):
    the interval's low end (2 psi_lo - 1) pi_(lo or hi) is > 0 iff psi_lo > 1/2 (pi_lo > 0 as m >= 1 then),
    and the central Clopper-Pearson interval at 1 - alpha/2 excludes 1/2 iff P(X >= b | 1/2) < alpha/4 or
    P(X <= b | 1/2) < alpha/4, i.e. iff p < alpha/2. So 0 is excluded only where p < alpha/2 <= alpha: never
    beside a p-value the test does not reject. With no discordant item, psi is free in [0, 1] and the interval
    is [-pi_hi, pi_hi]: never of zero width."""
    m = wins_a + wins_b
    psi_lo, psi_hi = clopper_pearson(wins_a, m, alpha / 2)
    pi_lo, pi_hi = clopper_pearson(m, n, alpha / 2)
    low = min((2 * psi_lo - 1) * pi_lo, (2 * psi_lo - 1) * pi_hi)
    high = max((2 * psi_hi - 1) * pi_lo, (2 * psi_hi - 1) * pi_hi)
    return low, high


def _rejects(d: np.ndarray, delta: float, alpha: float) -> bool:
    return sign_flip_p_value(d - delta) <= alpha


def bisect_boundary(rejects, accepted: float, rejected: float) -> float:
    """The boundary between an accepted shift and a rejected one (`rejects(shift)`), to BISECTION_STEP: the
    rejected end (an interval is not shortened by the step). Every inverted test here bisects through it."""
    while abs(rejected - accepted) > BISECTION_STEP:
        mid = (accepted + rejected) / 2
        if rejects(mid):
            rejected = mid
        else:
            accepted = mid
    return rejected


def _bisect(d: np.ndarray, accepted: float, rejected: float, alpha: float) -> float:
    return bisect_boundary(lambda delta: _rejects(d, delta, alpha), accepted, rejected)


def _upper_bound(d: np.ndarray, alpha: float, zero_rejected: bool) -> float:
    """The inverted test's upper end: the first shift above the mean that the test rejects (1 where none in
    [mean, 1] is). Where 0 lies above the mean, the row's own decision places it: a rejected 0 bounds the search
    from above (the end is below 0), an accepted 0 from below (the end is at or above 0)."""
    mean = exact_mean(d)
    if len(d) > EXACT_INTERVAL_ITEMS:
        end = min(1.0, mean + _normal_half_width(d, alpha))
        if 0 > mean and zero_rejected and end >= 0:  # the approximation disagrees with the exact test: rare
            return _below_zero(d, mean, alpha)
        return max(end, 0.0) if 0 > mean and not zero_rejected else end
    if 0 > mean and zero_rejected:
        return _below_zero(d, mean, alpha)
    accepted = max(mean, 0.0)
    if not _rejects(d, 1.0, alpha):
        return 1.0
    return _bisect(d, accepted, 1.0, alpha)


def _below_zero(d: np.ndarray, mean: float, alpha: float) -> float:
    """The upper end where the test rejects 0 above the mean: found between the mean and 0, always below 0."""
    end = _bisect(d, mean, 0.0, alpha)
    # the rejected end is 0 itself when every shift tried was accepted: step back to the accepted side
    return end if end < 0 else max(mean, -BISECTION_STEP / 2)


def _normal_half_width(d: np.ndarray, alpha: float) -> float:
    """Where |sum(d_i - delta)| = z sqrt(sum (d_i - delta)^2), the sign-flip law's normal approximation:
    (mean - delta)^2 = z^2 SS / (n (n - z^2)), SS the sum of squares about the mean."""
    n, z = len(d), float(norm.ppf(1 - alpha / 2))
    ss = float(np.sum((d - d.mean()) ** 2))
    return float(np.sqrt(z * z * ss / (n * (n - z * z)))) if n > z * z else 2.0


def hoeffding_interval(d: np.ndarray, alpha: float) -> tuple[float, float]:
    """Hoeffding's interval for the mean of n values in [-1, 1] (a range of 2), clipped to [-1, 1]."""
    h = float(np.sqrt(2 * np.log(2 / alpha) / len(d)))
    mean = exact_mean(d)
    return max(-1.0, mean - h), min(1.0, mean + h)


def paired_interval(differences, alpha: float, rejected: bool | None = None) -> Interval:
    """The interval beside the exact paired test of these differences, at level 1 - alpha (the row's own: Holm's,
    holm_levels). `rejected`: the row's decision (p or Holm); by default whether the exact p <= alpha. It never
    excludes 0 where the decision is "not rejected"; for scores other than 0/1 it excludes 0 exactly where the
    decision is "rejected" (the inverted test); for 0/1 scores only where p < alpha/2 (mcnemar_interval).
    NaNs for no items."""
    d = np.asarray(differences, dtype=float)
    if len(d) == 0:
        return Interval(float("nan"), float("nan"), alpha, "")
    if rejected is None:
        rejected = sign_flip_p_value(d) <= alpha
    if is_zero_one(d):
        low, high = mcnemar_interval(int((d > 0).sum()), int((d < 0).sum()), len(d), alpha)
        method = MCNEMAR_INTERVAL
    elif np.all(d == d[0]):
        low, high = hoeffding_interval(d, alpha)
        method = HOEFFDING_INTERVAL
    else:
        high = _upper_bound(d, alpha, rejected and 0 > exact_mean(d))
        low = -_upper_bound(-d, alpha, rejected and 0 < exact_mean(d))
        method = SIGN_FLIP_NORMAL_INTERVAL if len(d) > EXACT_INTERVAL_ITEMS else SIGN_FLIP_INTERVAL
    if not rejected:  # a no-op but for rounding at the boundary (see above): 0 stays inside
        low, high = min(low, 0.0), max(high, 0.0)
    return Interval(float(low), float(high), alpha, method)


def holm_levels(p_values, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(reject, level): Holm's decisions over the K p-values, and each row's own level for its interval:
    alpha / (K - r + 1) for a row rejected at rank r (p-values sorted ascending, ties in the given order), and
    alpha / (K - s + 1) for every row not rejected, s being the first rank not rejected.

    Why an interval at this level agrees with Holm's decision:
    - rejected at rank r: Holm's adjusted p-value max_{j <= r} (K - j + 1) p_(j) <= alpha, so (K - r + 1) p_(r)
      <= alpha, i.e. p_(r) <= level: the unadjusted test at the row's level rejects 0, and the inverted test's
      interval excludes 0;
    - not rejected, at rank t >= s: the ranks before s are rejected, so their terms are <= alpha and the adjusted
      p_(s) > alpha is (K - s + 1) p_(s) > alpha; then p_(t) >= p_(s) > alpha / (K - s + 1) = level: the test at
      the row's level does not reject 0, and the interval contains 0.
    (paired_interval takes the decision itself, so rounding at a boundary cannot break this.) Each interval
    covers its own row's difference with probability >= its level; they are not simultaneous."""
    p = np.asarray(p_values, dtype=float)
    k = len(p)
    if k == 0:
        return np.zeros(0, dtype=bool), np.zeros(0)
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(np.maximum.accumulate(p[order] * np.arange(k, 0, -1)), 1.0)
    reject_sorted = adjusted <= alpha
    ranks = np.arange(1, k + 1)
    first_kept = int(ranks[~reject_sorted][0]) if (~reject_sorted).any() else k + 1
    level_sorted = np.where(reject_sorted, alpha / (k - ranks + 1), alpha / max(k - first_kept + 1, 1))
    reject, level = np.empty(k, dtype=bool), np.empty(k)
    reject[order], level[order] = reject_sorted, level_sorted
    return reject, level


def interval_name(interval: Interval, alpha: float, k: int) -> str:
    """How a row's interval is named where it is printed: 'exact 95 % interval' for one comparison; over K,
    'exact 98.3 % interval, Holm-adjusted over 3', at the row's own Holm level (holm_levels)."""
    kind = "exact" if interval.method in (MCNEMAR_INTERVAL, SIGN_FLIP_INTERVAL) else interval.method.split(" (")[0]
    if kind == "the sign-flip test inverted":
        kind = "inverted sign-flip (normal approximation)"
    head = f"{kind} {_percent(1 - interval.alpha)} interval"
    return head if k <= 1 else f"{head}, Holm-adjusted over {k}"


def _percent(x: float) -> str:
    return f"{100 * x:.3g} %"
