"""Anytime-valid confidence sequences for the mean of a finite population sampled without replacement.

Certification (`safetyrepro certify`) asks, per configuration, what the paired score difference of two
models would be on the *whole* fixed item subset, while it evaluates only some of the items, in an
order it chooses as it goes, and stops when the answer is known. A fixed-n confidence interval is wrong
there (optional stopping); a confidence sequence covers the target at every sample size at once, so it
stays valid wherever evaluation stopped.

This is the hedged betting confidence sequence of Waudby-Smith & Ramdas ("Estimating means of bounded
random variables by betting", JRSS-B 2024, Sect. 4-5), in its without-replacement form ("Confidence
sequences for sampling without replacement", NeurIPS 2020): values y_i in [0, 1] are drawn in a uniformly
random order from a population of N with mean m*. For a candidate mean m, the mean of the items not yet
drawn is m_t = (N m - S_{t-1}) / (N - t + 1) (S the sum drawn so far); two gamblers bet for and against
y_t > m_t with predictable stakes lambda_t (the growth-rate plug-in of the paper, Sect. 5.1, truncated at
c / m_t and c / (1 - m_t), c = 0.9; before issue 56 the width-tuned plug-in with c = 1/2), and the hedged
capital K_t(m) = theta K+_t(m) + (1 - theta) K-_t(m) (theta = 1/2) is a nonnegative martingale when m = m*.
By Ville's inequality P(exists t: K_t(m*) >= 1/alpha) <= alpha, so {m : K_s(m) < 1/alpha for all s <= t}
covers m* at every t with probability >= 1 - alpha.

The candidates are a grid. When every feasible population mean is a grid point (item values on a known
lattice, `lattice`, fine enough that the grid has at most 4N + 1 points), the set of surviving grid
points holds m* itself and its extremes are the bounds;
otherwise each bound is widened by one grid step (the capital is continuous in m). A candidate whose m_t
leaves [0, 1] is impossible given what was drawn and is removed at once. After all N items are drawn the
mean is known exactly.

Vectorised over many independent streams (configurations x pairs), since a certification run keeps
hundreds of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

THETA = 0.5  # weight of the gambler betting on "above m"
TRUNCATION = 0.5  # width-tuned stakes at most c / m_t and c / (1 - m_t): the capital never drops below (1 - c) a step
# growth-rate stakes' c: where the differences vary little the Kelly stake is large and c = 1/2 would cap it (issue 56:
# five-seed means of a 0.25 lead, 82 items to a claim at 1/2, 54 at 0.9; on 0/1 answers 0.9 costs about 2 %)
GROWTH_TRUNCATION = 0.9
STAKES = ("growth", "width")
MAX_GRID = 20_001  # candidates per stream (bounds on memory: streams x grid floats)


def growth_stakes(mu_hat: np.ndarray, sigma2: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per stream (rows) and candidate mean m (columns), the growth-rate plug-in stakes (aGRAPA, Waudby-Smith &
    Ramdas Sect. 5.1) of the gambler against "mean <= m" and of the one against "mean >= m": the Kelly fraction
    (mu_hat - m) / (sigma2 + (mu_hat - m)^2) from the plug-in mean and variance of earlier draws, each side's
    share of it (>= 0). The caller truncates them to its step's range. The controlled steps of both targets bet
    with these (WorBettingCS.update, control_variate.ControlledBettingCS.update)."""
    gap = mu_hat[:, None] - m
    kelly = gap / (sigma2[:, None] + gap**2)
    return np.clip(kelly, 0.0, None), np.clip(-kelly, 0.0, None)


def _rows(s: np.ndarray, n: int):
    """Every stream in order as a slice: numpy reads and writes a slice in place, where an index array copies
    (a bank that every stream feeds at once, as plan's simulated runs do, updates about twice as fast)."""
    return slice(None) if len(s) == n and s[0] == 0 and s[-1] == n - 1 and (np.diff(s) == 1).all() else s


def kelly_stake(values, weights, upper: float = 1.0) -> tuple[float, float]:
    """The growth-optimal constant stake on a law of observations (values, weights; each already less the null's
    mean) and its growth rate per draw, max over lambda in [0, upper) of E log(1 + lambda x): the KL-inf rate no
    betting e-process beats on average. `upper`: the stake's bound, 1 over the largest loss an observation can
    bring."""
    from scipy.optimize import minimize_scalar

    x, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    w = w / w.sum()
    found = minimize_scalar(
        lambda lam: -(w @ np.log(np.maximum(1 + lam * x, 1e-300))), bounds=(0, upper * (1 - 1e-9)), method="bounded"
    )
    return float(found.x), float(-found.fun)


@dataclass(frozen=True)
class Bounds:
    lower: np.ndarray  # per stream, of the population mean in the caller's units
    upper: np.ndarray
    n: np.ndarray  # items drawn
    exact: np.ndarray  # every item drawn: the mean is known


class WorBettingCS:
    """n_streams confidence sequences, each for the mean of a population of `population` values in
    [low, high] drawn without replacement; each at level `alpha` (the caller splits a familywise
    alpha). `lattice`: the values are multiples of 1/lattice in the caller's units (e.g. a seed mean of
    5 seeds of a 0/1 difference: 5), so the grid can hold every feasible population mean. `stakes`: as
    IidBettingCS's, the growth-rate plug-in at every step by default (issue 56); "width" keeps the width-tuned
    stake of the module docstring for plain steps. The bounds are the hull of the surviving candidates, so they
    need no monotone capital either way."""

    def __init__(
        self,
        n_streams: int,
        population: int,
        alpha: float,
        low: float = -1.0,
        high: float = 1.0,
        lattice: int | None = None,
        stakes: str = "growth",
    ):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha {alpha} must be in (0, 1)")
        if population < 1 or n_streams < 0 or not high > low:
            raise ValueError("a confidence sequence needs a population of at least one item and low < high")
        if stakes not in STAKES:
            raise ValueError(f"stakes {stakes!r}: one of {', '.join(STAKES)}")
        self.stakes = stakes
        self.N, self.alpha, self.low, self.high = int(population), float(alpha), float(low), float(high)
        span = high - low
        coarse = min(MAX_GRID - 1, 4 * self.N)  # a step of 1/(2N) in the caller's units over [-1, 1]
        exact = None if lattice is None else int(round(self.N * lattice * span))
        self.on_lattice = exact is not None and exact <= coarse
        steps = exact if exact is not None and self.on_lattice else coarse
        self.grid = np.linspace(0.0, 1.0, steps + 1)  # candidate means of y = (x - low) / span
        self.step = 1.0 / steps
        g = len(self.grid)
        self.log_plus = np.zeros((n_streams, g))
        self.log_minus = np.zeros((n_streams, g))
        self.alive = np.ones((n_streams, g), dtype=bool)
        self.t = np.zeros(n_streams, dtype=np.int64)  # items drawn
        self.total = np.zeros(n_streams)  # sum of y drawn
        self.mu_sum = np.full(n_streams, 0.5)  # 1/2 + sum of y (the plug-in mean's numerator)
        self.var_sum = np.full(n_streams, 0.25)  # 1/4 + sum of (y_i - mu_hat_i)^2
        self._threshold = np.log(1.0 / self.alpha)

    def _y(self, x) -> np.ndarray:
        return (np.asarray(x, dtype=float) - self.low) / (self.high - self.low)

    def update(self, streams, values, gamma=None, deviation=None, deviation_span=None) -> None:
        """One new draw for each of `streams` (distinct indices), with values in [low, high].

        A control variate (certify/control.py SubsetControl): per stream, `deviation` is C - c_rest, a cheap
        score on the drawn item minus its mean over the items not drawn before it (known: the cheap scores are
        known for every item), so its mean given the earlier draws is exactly zero; |deviation| <=
        `deviation_span`, and `gamma` is its coefficient, fixed from earlier draws. Each gambler then bets on
        y - m_t - gamma deviation, still a martingale difference at the true mean, with the stakes truncated to
        its wider range at GROWTH_TRUNCATION and set by the growth-rate plug-in. A stream without a control
        (deviation_span 0) takes the plain step, bit for bit."""
        s = np.asarray(streams, dtype=np.int64)
        if len(s) == 0:
            return
        if np.any(self.t[s] >= self.N):
            raise ValueError("a stream drew more items than its population holds")
        span = self.high - self.low
        g = np.zeros(len(s)) if gamma is None else np.asarray(gamma, dtype=float)
        dev = np.zeros(len(s)) if deviation is None else np.asarray(deviation, dtype=float) / span
        w = np.zeros(len(s)) if deviation_span is None else np.asarray(deviation_span, dtype=float) / span
        if np.any(np.abs(dev) > w + 1e-12):
            raise ValueError("a control deviation is larger than the span it declared")
        y = np.clip(self._y(values), 0.0, 1.0)
        t = self.t[s] + 1  # this draw's index (1-based)
        mu_hat = self.mu_sum[s] / t  # plug-in mean before this draw
        sigma2 = self.var_sum[s] / t
        remaining = (self.N - t + 1).astype(float)
        m_t = (self.N * self.grid[None, :] - self.total[s][:, None]) / remaining[:, None]
        feasible = (m_t >= -1e-12) & (m_t <= 1 + 1e-12)
        m_t = np.clip(m_t, 0.0, 1.0)
        below = m_t + (np.abs(g) * w)[:, None]  # how far a gambler's gap can fall (the other's: rise)
        above = 1 - m_t + (np.abs(g) * w)[:, None]
        if self.stakes == "growth":  # every step, controlled or not (issue 56)
            lam_p, lam_m = growth_stakes(mu_hat, sigma2, m_t)
            c = np.full((len(s), 1), GROWTH_TRUNCATION)
        else:  # the width-tuned stake, a controlled step's the growth-rate one within its wider range
            lam = np.sqrt(2 * np.log(2 / self.alpha) / (sigma2 * t * np.log1p(t)))
            controlled = (w > 0)[:, None]
            grow_p, grow_m = growth_stakes(mu_hat, sigma2, m_t)
            lam_p = np.where(controlled, grow_p, lam[:, None])
            lam_m = np.where(controlled, grow_m, lam[:, None])
            c = np.where(controlled, GROWTH_TRUNCATION, TRUNCATION)
        with np.errstate(divide="ignore", invalid="ignore"):
            lam_plus = np.minimum(lam_p, np.where(below > 0, c / below, np.inf))
            lam_minus = np.minimum(lam_m, np.where(above > 0, c / above, np.inf))
        self.log_plus[s] += np.log1p(lam_plus * (y[:, None] - m_t - (g * dev)[:, None]))
        self.log_minus[s] += np.log1p(-lam_minus * (y[:, None] - m_t - (g * dev)[:, None]))
        hedged = np.logaddexp(np.log(THETA) + self.log_plus[s], np.log(1 - THETA) + self.log_minus[s])
        self.alive[s] &= feasible & (hedged < self._threshold)
        # the plug-in statistics, updated after the bet (predictable: they only use earlier draws); the spread
        # is that of the controlled value
        v = y - g * dev
        self.var_sum[s] += (v - mu_hat) ** 2
        self.mu_sum[s] += v
        self.total[s] += y
        self.t[s] = t
        # every item drawn: only the observed mean is left
        done = s[t == self.N]
        if len(done):
            mean = self.total[done] / self.N
            self.alive[done] = np.abs(self.grid[None, :] - mean[:, None]) <= self.step / 2 + 1e-12

    def bounds(self) -> Bounds:
        span = self.high - self.low
        exact = self.t == self.N
        any_alive = self.alive.any(axis=1)
        first = np.where(any_alive, self.alive.argmax(axis=1), 0)
        last = np.where(any_alive, self.alive.shape[1] - 1 - self.alive[:, ::-1].argmax(axis=1), 0)
        pad = 0.0 if self.on_lattice else self.step
        lo = np.clip(self.grid[first] - pad, 0.0, 1.0)
        hi = np.clip(self.grid[last] + pad, 0.0, 1.0)
        # no candidate left between grid points (off-lattice values): the cell around the observed mean
        est = np.where(self.t > 0, self.total / np.maximum(self.t, 1), 0.5)
        lo = np.where(any_alive, lo, np.clip(est - self.step, 0, 1))
        hi = np.where(any_alive, hi, np.clip(est + self.step, 0, 1))
        mean = self.total / self.N
        lo = np.where(exact, mean, lo)
        hi = np.where(exact, mean, hi)
        return Bounds(self.low + span * lo, self.low + span * hi, self.t.copy(), exact)


class GridEProcesses:
    """What the two i.i.d. betting sequences share (IidBettingCS here, ControlledBettingCS in control_variate.py):
    one-sided e-processes kept per stream at a grid of candidate means (`max_plus`: the running maximum of the
    log capital against "mean <= candidate", `max_minus` against "mean >= candidate"), read as anytime p-values
    and bounds. The grid is on the sequence's own scale: `_to_grid` and `_from_grid` map the caller's units to
    it and back (increasing), and `_grid_range` is what a side that rejected nothing reads."""

    grid: np.ndarray
    max_plus: np.ndarray
    max_minus: np.ndarray
    t: np.ndarray  # draws per stream
    _grid_range: tuple[float, float]

    def _to_grid(self, x: float) -> float:
        return float(x)

    def _from_grid(self, q: np.ndarray) -> np.ndarray:
        return q

    def index_of(self, x: float) -> int:
        """The grid position of a candidate given in the caller's units (it must be one: `extra`)."""
        q = round(self._to_grid(x), 12)
        i = int(np.searchsorted(self.grid, q))
        if i >= len(self.grid) or abs(self.grid[i] - q) > 1e-12:
            raise ValueError(f"{x} is not a candidate of this confidence sequence (pass it as extra)")
        return i

    def log_e_above(self, x: float) -> np.ndarray:
        """Per stream, log of the e-process against "mean <= x" (its running maximum)."""
        return self.max_plus[:, self.index_of(x)]

    def log_e_below(self, x: float) -> np.ndarray:
        """Per stream, log of the e-process against "mean >= x"."""
        return self.max_minus[:, self.index_of(x)]

    def log_e_table(self, nulls: tuple[tuple[str, float], ...]) -> np.ndarray:
        """(streams, len(nulls)): log_e_above(x) or log_e_below(x) for each ("above" | "below", x), kept until the
        next draw: configurations that share one sequence read it once a round, not once each."""
        key = (int(self.t.sum()), nulls)
        memo = self.__dict__.setdefault("_log_e_memo", {})
        if key not in memo:
            memo.clear()
            side = {"above": self.log_e_above, "below": self.log_e_below}
            memo[key] = np.stack([side[s](x) for s, x in nulls], axis=1)
        return memo[key]

    def bounds(self, alpha_side: float) -> tuple[np.ndarray, np.ndarray]:
        """Per stream, each side at level alpha_side, in the caller's units: the largest candidate the
        plus gambler has rejected together with every smaller one, and the smallest the minus one has rejected
        together with every larger one. Read so, a bound needs no monotone capital: were the mean below the lower
        bound, the first candidate at or above it was rejected, an event of chance alpha_side."""
        threshold = np.log(1.0 / alpha_side)
        low_run = np.cumprod(self.max_plus >= threshold, axis=1).sum(axis=1)  # rejected candidates from the bottom
        high_run = np.cumprod((self.max_minus >= threshold)[:, ::-1], axis=1).sum(axis=1)
        g = len(self.grid)
        lowest, highest = self._grid_range
        lo = np.where(low_run > 0, self.grid[np.maximum(low_run - 1, 0)], lowest)
        hi = np.where(high_run > 0, self.grid[np.minimum(g - high_run, g - 1)], highest)
        return self._from_grid(lo), self._from_grid(np.maximum(hi, lo))


class IidBettingCS(GridEProcesses):
    """n_streams one-sided betting e-processes and confidence sequences for the mean of i.i.d. values in
    [low, high] (the *population* target: items as draws from the benchmark, seeds from the decoder).

    With replacement the candidate mean m stays fixed: a gambler bets for y > m with capital
    K+_t(m) = prod (1 + lambda+_i (y_i - m)), one against with K-_t(m) = prod (1 - lambda-_i (y_i - m)),
    lambda predictable and truncated at c / m and c / (1 - m). Under mean <= m, K+(m) is a nonnegative
    supermartingale (each factor has expectation 1 + lambda (mu - m) <= 1), so K+(m) alone is an e-process for
    the whole composite null "mean <= m", and K-(m) for "mean >= m".

    `stakes`: "growth" (the default, issue 56) sets each candidate's stake by the growth-rate plug-in (aGRAPA,
    Waudby-Smith & Ramdas Sect. 5.1, `growth_stakes`), c = GROWTH_TRUNCATION: a claim is a test at a small
    alpha / (2 K), and the Kelly stake for the candidate tested grows fastest there (a 0.15 lead on 0/1 answers
    at discordance 0.5: a median 387 items to the claim where the width-tuned stake needs 479; perf/
    certify_items_to_decision.md). "width" keeps the predictable plug-in tuned for a narrow interval, the same
    stake at every candidate with c = 1/2: its capitals are monotone in m (K+ nonincreasing, K- nondecreasing),
    which `cell_log_e` needs. The growth-rate stakes differ by candidate, so monotonicity is not assumed: a
    bound is read only where every candidate beyond it is rejected too (`bounds`).

    Kept per candidate: the log capital now and its running maximum over t (the anytime p-value of
    "mean <= m" is 1 / max_s K+_s(m))."""

    def __init__(
        self,
        n_streams: int,
        alpha: float,
        low: float = -1.0,
        high: float = 1.0,
        grid_points: int = 201,
        extra: tuple[float, ...] = (),
        stakes: str = "growth",
    ):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha {alpha} must be in (0, 1)")
        if n_streams < 0 or not high > low:
            raise ValueError("a confidence sequence needs low < high")
        if stakes not in STAKES:
            raise ValueError(f"stakes {stakes!r}: one of {', '.join(STAKES)}")
        self.stakes = stakes
        self.alpha, self.low, self.high = float(alpha), float(low), float(high)
        self._grid_range = (0.0, 1.0)
        points = np.concatenate([np.linspace(0.0, 1.0, grid_points), [self._y_scalar(x) for x in extra]])
        self.grid = np.unique(np.round(points, 12))
        g = len(self.grid)
        c = GROWTH_TRUNCATION if stakes == "growth" else TRUNCATION
        with np.errstate(divide="ignore"):  # the stakes' caps c / m and c / (1 - m), fixed per candidate
            self._cap_plus = np.where(self.grid > 0, c / self.grid, np.inf)
            self._cap_minus = np.where(self.grid < 1, c / (1 - self.grid), np.inf)
        self.log_plus = np.zeros((n_streams, g))
        self.log_minus = np.zeros((n_streams, g))
        self.max_plus = np.zeros((n_streams, g))  # running maxima (log; capital 1 before any draw)
        self.max_minus = np.zeros((n_streams, g))
        self.t = np.zeros(n_streams, dtype=np.int64)
        self.total = np.zeros(n_streams)
        self.mu_sum = np.full(n_streams, 0.5)
        self.var_sum = np.full(n_streams, 0.25)
        self._log_inv_alpha = np.log(1.0 / self.alpha)

    def _y_scalar(self, x: float) -> float:
        return (float(x) - self.low) / (self.high - self.low)

    def update(self, streams, values) -> None:
        s = np.asarray(streams, dtype=np.int64)
        if len(s) == 0:
            return
        s = _rows(s, len(self.t))
        y = np.clip((np.asarray(values, dtype=float) - self.low) / (self.high - self.low), 0.0, 1.0)
        t = self.t[s] + 1
        mu_hat = self.mu_sum[s] / t
        sigma2 = self.var_sum[s] / t
        if self.stakes == "growth":
            lam_p, lam_m = growth_stakes(mu_hat, sigma2, self.grid[None, :])
        else:
            lam_p = lam_m = np.sqrt(2 * self._log_inv_alpha / (sigma2 * t * np.log1p(t)))[:, None]
        gap = y[:, None] - self.grid[None, :]
        plus = self.log_plus[s] + np.log1p(np.minimum(lam_p, self._cap_plus) * gap)
        minus = self.log_minus[s] + np.log1p(-np.minimum(lam_m, self._cap_minus) * gap)
        self.log_plus[s], self.log_minus[s] = plus, minus
        self.max_plus[s] = np.maximum(self.max_plus[s], plus)
        self.max_minus[s] = np.maximum(self.max_minus[s], minus)
        self.var_sum[s] += (y - mu_hat) ** 2
        self.mu_sum[s] += y
        self.total[s] += y
        self.t[s] = t

    def _to_grid(self, x: float) -> float:
        return self._y_scalar(x)

    def _from_grid(self, q: np.ndarray) -> np.ndarray:
        return self.low + (self.high - self.low) * q

    def cell_log_e(self) -> np.ndarray:
        """(streams, cells): for each grid cell [q_k, q_k+1], a lower bound on the running maximum of the
        hedged capital (K+ + K-)/2 at every mean inside it: K+ is smallest at the cell's right end and K-
        at its left (the width-tuned stakes' monotone capital), and the hedge is at least half of either."""
        if self.stakes != "width":
            raise ValueError("cell_log_e needs capital monotone in the candidate: stakes='width'")
        return np.log(0.5) + np.maximum(self.max_plus[:, 1:], self.max_minus[:, :-1])
