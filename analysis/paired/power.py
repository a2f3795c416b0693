"""What a grid can detect: the power of the per-configuration paired verdict, the items it needs, and
the smallest difference it finds.

The model (docs/analysis.md, *Power and the detectable difference*). A configuration scores n items
for two models A and B. Each item is discordant (the two models' 0/1 answers differ) with probability
D, the discordance, independently; a discordant item goes to A with probability p = (1 + E/D)/2, where
E is the true paired difference in accuracy, E = D(2p - 1), so |E| <= D. With M discordant items and
W of them won by A, the analysis tests W ~ Bin(M, 1/2) exactly and two-sided (the McNemar test that
`significance.sign_flip_p_value` computes for 0/1 scores), then adjusts with Holm over the K
configurations of a family. The configuration's claim is counted when p <= alpha/K: Holm's first step,
the most lenient bar one true difference among K configurations has to pass (a smaller p-value elsewhere
in the family would only raise it).

Power(n, D, E, K, alpha) = sum_m P(M = m) P(reject | m), M ~ Bin(n, D), computed exactly (no normal
approximation; only values of M farther than 10 standard deviations + 40 from nD are dropped, whose total
probability is below 4e-22 by Bernstein's inequality). The headline power is directional: reject *and* W
is on A's side, since a claim with the wrong sign is no finding; the two-sided power (reject either way)
is given beside it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import gammaln
from scipy.stats import binom, norm

from safetyrepro.errors import UserError

from . import sign_flip  # the test's own lattice and null law

MAX_ITEMS = 100_000  # items_needed searches n = 1 .. MAX_ITEMS
TAIL_SDS, TAIL_PAD = 10.0, 40.0  # the window of M kept around nD (see the module docstring)
REL_TOL = 1e-9  # a p-value equal to alpha/K in exact arithmetic must not be lost to rounding
EFFECT_TOL = 1e-6  # detectable_difference's bisection stops when the bracket is this narrow
BLOCK_ELEMENTS = 2_000_000  # (n, m) pairs evaluated at once in the items_needed scan: bounded memory
ITEM_COLUMNS = ("model", "config_id", "item_id", "seed", "item_score")

TEST = (
    "exact two-sided binomial (McNemar) test on each configuration's discordant items; a claim counts at "
    "p <= alpha/K (Holm's first step over K configurations) with the sign of the true difference"
)
MODEL = (
    "n items per configuration; each item discordant (the models' 0/1 answers differ) with probability D; "
    "a discordant item goes to model A with probability (1 + E/D)/2, E = the true paired difference in accuracy"
)


# -- results ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Power:
    n_items: int
    discordance: float
    effect: float
    n_configs: int
    alpha: float
    power: float  # reject at alpha/K and the sign agrees with E (the headline)
    power_two_sided: float  # reject at alpha/K in either direction

    @property
    def level(self) -> float:
        return self.alpha / self.n_configs


@dataclass(frozen=True)
class ItemsNeeded:
    discordance: float
    effect: float
    n_configs: int
    alpha: float
    power: float  # the target
    n_items: int | None  # the first n whose power reaches the target; None when none up to max_items does
    achieved: float | None  # the power at n_items
    max_items: int
    reason: str = ""  # why n_items is None


@dataclass(frozen=True)
class DetectableDifference:
    n_items: int
    discordance: float
    n_configs: int
    alpha: float
    power: float  # the target
    effect: float | None  # the smallest E (within EFFECT_TOL, never below) whose power reaches the target
    achieved: float | None  # the power at that effect
    reason: str = ""  # why effect is None
    basis: str = ""  # the design the power is read at, in words (detectable_from_differences)


# -- validation ------------------------------------------------------------------------------------
def _unit(name: str, value: float, what: str, closed: bool) -> float:
    """A number in (0, 1] (closed) or (0, 1); NaN fails both comparisons and is refused too."""
    ok = (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and (0 < value <= 1 if closed else 0 < value < 1)
    )
    if not ok:
        raise UserError(f"{name} {value!r} must be in (0, 1{']' if closed else ')'}: {what}")
    return float(value)


def _whole(name: str, value: int, what: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise UserError(f"{name} {value!r} must be a whole number >= 1: {what}")
    return int(value)


def _design(discordance: float, effect: float | None, n_configs: int, alpha: float) -> tuple[float, float, int, float]:
    d = _unit("discordance", discordance, "the share of items on which the two models' answers differ", True)
    e = 0.0 if effect is None else _unit("effect", effect, "the true paired difference in accuracy", True)
    if e > d:
        raise UserError(
            f"effect {effect!r} exceeds discordance {discordance!r}: a paired difference in accuracy "
            f"cannot exceed the share of items on which the two models differ"
        )
    k = _whole("configs", n_configs, "the number of configurations Holm adjusts over")
    a = _unit("alpha", alpha, "the familywise error level", False)
    return d, e, k, a


def _target(power: float) -> float:
    return _unit("power", power, "the target probability of a correct claim", False)


def check_design(discordance: float, n_configs: int, alpha: float) -> None:
    """Refuse a bad discordance, family or alpha where no difference is to be found (plan --certify's 'within'
    alone: two models alike)."""
    _design(discordance, None, n_configs, alpha)


def check_family(n_configs: int, alpha: float) -> None:
    """Refuse a bad family or alpha where neither a discordance nor a difference is asked for (plan --certify
    --ideal: the shares and their agreement say the rest)."""
    _whole("configs", n_configs, "the number of configurations Holm adjusts over")
    _unit("alpha", alpha, "the familywise error level", False)


def check_settings(effect: float, alpha: float, power: float) -> None:
    """Refuse a bad effect, alpha or target power before any pilot is read (the pilot gives D and K)."""
    _unit("effect", effect, "the true paired difference in accuracy", True)
    _unit("alpha", alpha, "the familywise error level", False)
    _target(power)


# -- the test and the law of M ---------------------------------------------------------------------
def _critical(m: np.ndarray, level: float) -> np.ndarray:
    """c_m: the largest w with two-sided p-value 2 P(Bin(m, 1/2) <= w) <= level, or -1 when no outcome
    rejects. The test rejects when W <= c_m or W >= m - c_m (the regions never meet: level < 1).
    binom.ppf is floating point, so start above it and step down until the bar holds exactly."""
    bar = level * (1 + REL_TOL)
    c = np.minimum(binom.ppf(level / 2, m, 0.5) + 2, m).astype(np.int64)
    for _ in range(8):
        too_high = (c >= 0) & (2 * binom.cdf(c, m, 0.5) > bar)
        if not too_high.any():
            return c
        c = np.where(too_high, c - 1, c)
    raise AssertionError("critical values did not settle")  # ppf is never that far off


def _reject(m: np.ndarray, c: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """P(reject toward A | m) and P(reject either way | m) when each discordant item goes to A with p."""
    toward = binom.sf(m - c - 1, m, p)  # W >= m - c; c = -1 gives P(W > m) = 0
    away = binom.cdf(c, m, p)  # W <= c
    return toward, toward + away


def _window(ns: np.ndarray, d: float) -> tuple[int, int]:
    """The values of M kept for every n in ns (the rest has probability below 4e-22 each n)."""
    sd = np.sqrt(ns * d * (1 - d))
    lo = np.maximum(0, np.floor(ns * d - TAIL_SDS * sd - TAIL_PAD))
    hi = np.minimum(ns, np.ceil(ns * d + TAIL_SDS * sd + TAIL_PAD))
    return int(lo.min()), int(hi.max())


def _weights(ns: np.ndarray, lo: int, hi: int, d: float) -> np.ndarray:
    """P(M = m), M ~ Bin(n, d): one row per n in ns, one column per m = lo..hi (0 where m > n).
    Log-gamma on the few distinct arguments, not scipy's binom.pmf per element: the scan over n
    evaluates up to ~1e8 of them."""
    m = np.arange(lo, hi + 1)
    if d == 1.0:  # log(1 - d) = -inf; M = n surely
        return (ns[:, None] == m[None, :]).astype(float)
    k = ns[:, None] - m[None, :]  # the items that agree
    base = max(int(ns[0]) - hi, 0)
    lg_k = gammaln(np.arange(base, int(ns[-1]) - lo + 1) + 1.0)
    log_w = (
        gammaln(ns + 1.0)[:, None]
        - gammaln(m + 1.0)[None, :]
        - lg_k[np.clip(k - base, 0, None)]
        + m[None, :] * math.log(d)
        + k * math.log1p(-d)
    )
    return np.exp(np.where(k >= 0, log_w, -np.inf))


class _Curve:
    """Power as a function of n for one (D, E, level). The rejection probabilities per m do not depend
    on n, so they are computed once (grown on demand) and every n is one weighted sum."""

    def __init__(self, d: float, e: float, level: float):
        self.d, self.p, self.level = d, (1 + e / d) / 2, level
        self.toward = np.empty(0)
        self.either = np.empty(0)

    def _grow(self, m_max: int) -> None:
        have = len(self.toward)
        if m_max < have:
            return
        m = np.arange(have, max(m_max + 1, 2 * have))
        toward, either = _reject(m, _critical(m, self.level), self.p)
        self.toward, self.either = np.r_[self.toward, toward], np.r_[self.either, either]

    def at(self, ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(directional, two-sided) power at each n in ns (ascending)."""
        lo, hi = _window(ns, self.d)
        self._grow(hi)
        w = _weights(ns, lo, hi, self.d)
        return w @ self.toward[lo : hi + 1], w @ self.either[lo : hi + 1]


# -- the public functions --------------------------------------------------------------------------
def power(n_items: int, discordance: float, effect: float, n_configs: int, alpha: float = 0.05) -> Power:
    """The probability that one configuration with n_items items, discordance D and true paired
    difference E (A better) is claimed for A at Holm's first step over n_configs configurations:
    exact two-sided binomial test on the discordant items at alpha/K, with the right sign."""
    n = _whole("items", n_items, "the items per configuration")
    d, e, k, a = _design(discordance, effect, n_configs, alpha)
    toward, either = _Curve(d, e, a / k).at(np.array([n]))
    return Power(n, d, e, k, a, float(toward[0]), float(either[0]))


def _block_size(start: int, d: float) -> int:
    """How many n to evaluate at once: as many as keep the (n, m) table under BLOCK_ELEMENTS."""
    width = 2 * TAIL_SDS * math.sqrt(start * d * (1 - d)) + 2 * TAIL_PAD
    size = 4096
    while size > 64 and size * (width + size * d) > BLOCK_ELEMENTS:
        size //= 2
    return size


def items_needed(
    discordance: float,
    effect: float,
    n_configs: int,
    alpha: float = 0.05,
    power: float = 0.8,
    max_items: int = MAX_ITEMS,
) -> ItemsNeeded:
    """The smallest n in 1..max_items whose (directional) power reaches `power`. The power of an exact
    test is not monotone in n (a saw-tooth: the attainable p-values jump as M grows), so a few n above
    this one can fall short again; this is the first n that reaches the target, found by evaluating
    every n in turn (in vectorised blocks). None, with the reason, when no n up to max_items does."""
    d, e, k, a = _design(discordance, effect, n_configs, alpha)
    target, cap = _target(power), _whole("max_items", max_items, "the largest item count searched")
    curve, start = _Curve(d, e, a / k), 1
    while start <= cap:
        ns = np.arange(start, min(start + _block_size(start, d), cap + 1))
        toward, _ = curve.at(ns)
        hit = np.flatnonzero(toward >= target)
        if hit.size:
            return ItemsNeeded(d, e, k, a, target, int(ns[hit[0]]), float(toward[hit[0]]), cap)
        start = int(ns[-1]) + 1
    last = float(curve.at(np.array([cap]))[0][0])
    return ItemsNeeded(
        d,
        e,
        k,
        a,
        target,
        None,
        None,
        cap,
        f"no item count up to {cap:,} reaches power {target:g} (power at {cap:,}: {last:.3f})",
    )


def detectable_difference(
    n_items: int, discordance: float, n_configs: int, alpha: float = 0.05, power: float = 0.8
) -> DetectableDifference:
    """The smallest paired difference E in (0, D] that n_items items find with (directional) power
    `power`: bisection, since at fixed n the power grows with E (W is stochastically larger as p grows).
    Returned as the upper end of the final bracket (within 1e-6), so its power does reach the target.
    None when even E = D (every discordant item to A) falls short."""
    n = _whole("items", n_items, "the items per configuration")
    d, _, k, a = _design(discordance, None, n_configs, alpha)
    target = _target(power)
    ns = np.array([n])
    lo, hi = _window(ns, d)
    m = np.arange(lo, hi + 1)
    w, c = _weights(ns, lo, hi, d)[0], _critical(m, a / k)

    def at(e: float) -> float:
        return float(w @ _reject(m, c, (1 + e / d) / 2)[0])

    return _detectable(at, n, d, k, a, target)


def _smallest_effect(at, d: float, target: float, guess: float | None = None) -> float:
    """Bisection on (0, d] for the smallest E with at(E) >= target, given at(d) >= target: the upper
    end of the final bracket, so its power does reach the target.

    Each at() of a long fractional item list is a law of a million lattice points (seconds), and the
    bisection asks ~20. Power grows with E, so a step whose midpoint lies outside the bracket already
    evaluated (`known`: at(low) < target <= at(high)) is decided without asking: Brent's method narrows that
    bracket in a few calls first (from around `guess`, an approximate answer, where there is one), and the
    bisection then replays the same steps to the same result."""
    known = _known_bracket(at, d, target, guess)
    low, high = 0.0, d  # power(high) >= target throughout
    while high - low > EFFECT_TOL:
        mid = (low + high) / 2
        if known[0] < mid < known[1]:
            reached = at(mid) >= target
            known = (known[0], mid) if reached else (mid, known[1])
        else:
            reached = mid >= known[1]
        low, high = (low, mid) if reached else (mid, high)
    return high


def _known_bracket(at, d: float, target: float, guess: float | None) -> tuple[float, float]:
    """(low, high) with at(low) < target <= at(high) (low = 0 assumed, as the bisection assumes it: the power
    at no difference is the test's size, below any target), narrowed to ~EFFECT_TOL / 16 by Brent's method;
    with a guess, first to the few steps around it where at() crosses the target."""

    known = [0.0, d]

    def gap(e: float) -> float:
        value = at(e) - target
        if value >= 0:
            known[1] = min(known[1], e)
        else:
            known[0] = max(known[0], e)
        return value

    if gap(0.0) >= 0:  # not the power curve the bisection assumes: it asks every step itself
        return 0.0, d
    if guess is not None and 0 < guess < d:
        e, step = guess, max(guess * 1e-3, EFFECT_TOL)
        reached = gap(e) >= 0
        while 0 < e < d:  # away from the guess, each step 4 times the last, until at() is on the other side
            e = e - step if reached else e + step
            if 0 < e < d and (gap(e) >= 0) != reached:
                break
            step *= 4
    brentq(gap, known[0], known[1], xtol=EFFECT_TOL / 16, maxiter=60, full_output=True, disp=False)
    return known[0], known[1]


# -- from the observed item differences ------------------------------------------------------------
ASSUMED_DISCORDANCE = 0.3  # plan's assumed discordance (docs/analysis.md's worked example, plan's own hint)


def detectable_from_differences(
    differences, n_configs: int, alpha: float = 0.05, power: float = 0.8
) -> DetectableDifference:
    """The smallest true paired difference E that one configuration's items find at (directional) power
    `power` under the test `safetyrepro verdict` and the analysis run on them, at Holm's first step alpha/K;
    `basis` says which design it is read at.

    0/1 scores (issue 53: from the design, not the observed disagreement): power()'s model, M ~ Bin(n, D), at a
    design discordance D: the observed share of differing items when any differs, else ASSUMED_DISCORDANCE
    (plan's); a difference E larger than D needs at least E discordance, so E is read at max(D, E). Two runs
    that never differ on 50 items thus still detect a large difference, as the test would (p = 2^-49 at
    E = 1), instead of "none, however large".

    Other bounded scores (seed and epoch means): the exact sign-flip test is conditional on the magnitudes
    |d_i|, so they are kept as observed (a 5-seed item difference of 0.4 weighs 0.4, not 1) and each item with
    d_i != 0 goes to A independently with probability p; E = (2p - 1) mean|d_i|, so E <= mean|d_i| = the
    discordance reported. Computed exactly: the law of the weight U of the items won by A is a convolution of
    binomials on the differences' lattice (the same law the p-value is read from, at p = 1/2)."""
    curve = power_curve(differences, n_configs, alpha)
    target = _target(power)
    if isinstance(curve, DetectableDifference):
        return DetectableDifference(**{**curve.__dict__, "power": target})
    found = _detectable(curve.at, curve.n, curve.upper, curve.k, curve.alpha, target, curve.guess(target))
    return DetectableDifference(
        found.n_items, curve.discordance, found.n_configs, found.alpha, target, found.effect, found.achieved,
        found.reason, curve.basis,
    )  # fmt: skip


def power_from_differences(differences, effect: float, n_configs: int, alpha: float = 0.05) -> float:
    """The (directional) power at true difference `effect` in detectable_from_differences' design (0 where
    the design allows no difference that large: above the magnitudes' mean for bounded scores)."""
    curve = power_curve(differences, n_configs, alpha)
    if isinstance(curve, DetectableDifference) or not 0 < effect <= curve.upper:
        return 0.0
    return curve.at(effect)


@dataclass(frozen=True)
class _PowerCurve:
    at: Callable[[float], float]  # the power at a true difference
    n: int
    discordance: float  # the design's (0/1) or the observed mean |d| (bounded)
    upper: float  # the largest difference the design allows
    k: int
    alpha: float
    basis: str
    guess: Callable[[float], float | None]  # where to start looking for a target power


def power_curve(differences, n_configs: int, alpha: float) -> _PowerCurve | DetectableDifference:
    """The power of one configuration's test as a function of the true difference (detectable_from_differences'
    design); a DetectableDifference with the reason where none can be read."""
    dif = np.asarray(differences, dtype=float)
    n = _whole("items", len(dif), "the items of the configuration")
    k = _whole("configs", n_configs, "the number of configurations Holm adjusts over")
    a = _unit("alpha", alpha, "the familywise error level", False)
    if np.all(np.isin(dif, (-1.0, 0.0, 1.0))):
        return _binary_curve(dif, n, k, a)
    mags = np.abs(dif[dif != 0])
    d = float(mags.sum() / n)
    w = sign_flip.integer_weights(mags)
    w = w[w > 0]
    total = int(w.sum())
    if total == 0:  # magnitudes below the lattice's resolution
        return DetectableDifference(n, d, k, a, 0.0, None, None, "the two models' item scores never differ")
    null = sign_flip.subset_sum_law(w)
    s = np.abs(2 * np.arange(total + 1) - total)  # |sum of signed d| on the lattice, for U = u
    tail = np.cumsum(np.bincount(s, weights=null, minlength=total + 1)[::-1])[::-1]  # P(S >= s)
    toward = (tail[s] <= (a / k) * (1 + REL_TOL)) & (2 * np.arange(total + 1) > total)

    def at(e: float) -> float:
        if e == 0:  # the null law, already at hand
            return float(null[toward].sum())
        if e == d:  # every differing item goes to A: U = total surely
            return float(toward[total])
        return float(sign_flip.subset_sum_law(w, (1 + e / d) / 2)[toward].sum())

    basis = (
        f"the exact sign-flip test on these items' own differences (mean |A - B| {d:.3f}, "
        f"{len(mags)} of {n} items differ)"
    )
    return _PowerCurve(at, n, d, d, k, a, basis, lambda target: _normal_guess(w, toward, d, target))


def _binary_curve(dif: np.ndarray, n: int, k: int, a: float) -> _PowerCurve:
    """power()'s unconditional model at the design discordance (the observed share, or plan's assumed one where
    no item differs), raised to E for a difference E above it."""
    m_seen = int(np.count_nonzero(dif))
    design = m_seen / n if m_seen else ASSUMED_DISCORDANCE
    basis = (
        f"the exact McNemar test at the observed discordance {design:.3f} ({m_seen} of {n} items differ; items "
        f"as draws, M ~ Bin(n, D))"
        if m_seen
        else f"the exact McNemar test at the discordance plan assumes, {ASSUMED_DISCORDANCE:g} (no item differs "
        f"in these runs; items as draws, M ~ Bin(n, D))"
    )
    m = np.arange(n + 1)
    c = _critical(m, a / k)
    ns = np.array([n])

    def at(e: float) -> float:
        dd = max(design, e)  # a difference E needs at least E discordance
        w = _weights(ns, 0, n, dd)[0]
        return float(w @ _reject(m, c, (1 + e / dd) / 2)[0])

    return _PowerCurve(at, n, design, 1.0, k, a, basis, lambda target: None)


def _normal_guess(w: np.ndarray, toward: np.ndarray, d: float, target: float) -> float | None:
    """Where the normal approximation of U (mean p W, variance p (1 - p) sum w^2) puts the smallest
    difference found with `target` power: a place to start looking, never the answer (exact laws decide)."""

    region = np.flatnonzero(toward)
    if not len(region):
        return None
    total, spread = float(w.sum()), float(np.square(w, dtype=float).sum())

    def approx(e: float) -> float:
        p = (1 + e / d) / 2
        return float(norm.sf((region[0] - 0.5 - p * total) / math.sqrt(max(p * (1 - p) * spread, 1e-300))))

    low, high = 0.0, d
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (low, mid) if approx(mid) >= target else (mid, high)
    return high


def _detectable(
    at, n: int, d: float, k: int, a: float, target: float, guess: float | None = None
) -> DetectableDifference:
    """The smallest difference found with `target` power, `at(e)` being the power at difference e (up to the
    discordance d, the largest difference d allows); none when even d falls short."""
    at = _remembered(at)  # the bisection's last point, and d itself, are asked again below
    best = at(d)
    if best < target:
        return DetectableDifference(
            n,
            d,
            k,
            a,
            target,
            None,
            None,
            f"even a difference equal to the discordance ({d:.3g}) has power {best:.3f} at {n:,} items",
        )
    high = _smallest_effect(at, d, target, guess)
    return DetectableDifference(n, d, k, a, target, high, at(high))


def _remembered(at):
    """`at` asking each point once."""
    seen: dict[float, float] = {}

    def once(e: float) -> float:
        if e not in seen:
            seen[e] = at(e)
        return seen[e]

    return once


# -- from a pilot ----------------------------------------------------------------------------------
def pilot_discordance(items: pd.DataFrame) -> pd.DataFrame:
    """Observed discordance per benchmark and model pair (model_a < model_b alphabetically) from item
    records in items.parquet's format: per configuration, the mean |A - B| of the two models'
    seed-averaged item scores over the items both answered (`effective_discordance`); then the mean
    over the benchmark's configurations. Columns: benchmark, model_a, model_b, n_configs, n_items (the
    fewest paired items in any of its configurations: all equal in a sweep), discordance. For 0/1
    scores this is the share of items on which the answers differ, the model's D exactly."""
    missing = [c for c in ITEM_COLUMNS if c not in items.columns]
    if missing:
        raise UserError(f"item records lack column(s) {', '.join(missing)}; they need: {', '.join(ITEM_COLUMNS)}")
    scores = pd.to_numeric(items["item_score"], errors="coerce")
    if scores.isna().any():
        i = int(np.flatnonzero(scores.isna().to_numpy())[0])
        raise UserError(f"item records row {i + 1}: item_score {items['item_score'].iloc[i]!r} is not a number")
    frame = pd.DataFrame(
        {
            "config_id": items["config_id"].astype(str),
            "item_id": items["item_id"].astype(str),
            "model": items["model"].astype(str),
            "score": scores.astype(float),
        }
    )
    wide = frame.groupby(["config_id", "item_id", "model"])["score"].mean().unstack("model")
    parts = [_pair_discordance(wide, a, b) for a, b in combinations(sorted(wide.columns), 2)]
    parts = [p for p in parts if len(p)]
    columns = ["benchmark", "model_a", "model_b", "n_configs", "n_items", "discordance"]
    if not parts:
        return pd.DataFrame(columns=columns)
    return pd.concat(parts, ignore_index=True)[columns].sort_values(columns[:3], ignore_index=True)


def pilot_differences(items: pd.DataFrame) -> dict[tuple[str, str, str], np.ndarray]:
    """Per (benchmark, model_a, model_b) as in pilot_discordance, the seed-averaged item differences A - B of
    the benchmark's median configuration by mean |A - B| (the lower middle one; ties by id): what `plan GRID`
    reads its detectable difference from, under the test that is run on them (detectable_from_differences)."""
    frame = pd.DataFrame(
        {
            "config_id": items["config_id"].astype(str),
            "item_id": items["item_id"].astype(str),
            "model": items["model"].astype(str),
            "score": pd.to_numeric(items["item_score"], errors="coerce").astype(float),
        }
    )
    wide = frame.groupby(["config_id", "item_id", "model"])["score"].mean().unstack("model")
    out: dict[tuple[str, str, str], np.ndarray] = {}
    for a, b in combinations(sorted(wide.columns), 2):
        both = wide[[a, b]].dropna()
        diff = both[a] - both[b]
        spread = diff.abs().groupby(level="config_id").mean()
        for benchmark, configs in spread.groupby(spread.index.str.split("/").str[0]):
            ranked = sorted(configs.index, key=lambda c: (configs[c], c))
            median = ranked[(len(ranked) - 1) // 2]
            out[(str(benchmark), a, b)] = diff.xs(median, level="config_id").to_numpy(dtype=float)
    return out


def _pair_discordance(wide: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    both = wide[[a, b]].dropna()
    differ = (both[a] - both[b]).abs().groupby(level="config_id").agg(["mean", "size"])
    benchmark = differ.index.str.split("/").str[0]  # envelope.benchmark_of, vectorised
    out = differ.groupby(benchmark).agg(
        discordance=("mean", "mean"), n_configs=("mean", "size"), n_items=("size", "min")
    )
    return out.rename_axis("benchmark").reset_index().assign(model_a=a, model_b=b)


def effective_discordance(differences) -> float:
    """The D the power model is read at, from one configuration's item differences A - B: the mean
    |d_i|. For 0/1 scores it is the share of discordant items. For seed means (|d_i| a multiple of
    1/n_seeds) it is smaller than the share of items with any difference, which would overstate D:
    the test's null variance is sum d_i^2 <= sum |d_i|, so reading the binary model at mean |d_i|
    errs on the side of a larger detectable difference, never a smaller one."""
    d = np.abs(np.asarray(differences, dtype=float))
    return float(d.mean()) if len(d) else float("nan")
