"""What certification knows about one configuration's pairs: a sequence per pair, for one of two targets,
read in the benchmark's declared direction. The rounds (algorithm.py) feed it paired item scores and ask
for claims, bounds and the running numbers the allocation plans with.

Targets (docs/methods/certify.md, *What is certified*):
- `population` (the default): the two models on the benchmark's items as draws from the benchmark, with
  the configuration's seeds, its one draw of few-shot examples and its template held fixed (not drawn: five
  seeds sharing a shift carry it into every item, issue 53). Items come in a uniformly random order of a
  random subset, so they are i.i.d. draws; the sequences are with replacement
  (confidence_sequence.IidBettingCS) and never become exact: two identical models keep 0 inside their
  bounds however many items are in.
- `subset`: the fixed subset's realised difference, the number the full grid reports (the paper's
  rho_flip reads it); sequences without replacement (WorBettingCS), exact once every item is in.

Direction: theta > 0 always means model a is better. Where higher is better theta is the paired
difference of means. For CrowS-Pairs (closer to 0.5 is better) theta = |p_b - 0.5| - |p_a - 0.5|, which is
not a mean of item differences: it is bounded from simultaneous sequences for the two shares. Its sign is,
though: theta = -sign(d s) min(|d|, |s|) with d = p_a - p_b and s = p_a + p_b - 1, the means of the per-item
x_a - x_b and x_a + x_b - 1, so "theta <= 0" is the union of two quadrants of (d, s) and the population target
tests it on the paired items (issue 56): both models answer the same items alike, and the two shares'
sequences, blind to that, left most CrowS-Pairs configurations undecided (perf/certify_crows_paired.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .closed_testing import HI, LO, NOT_A, NOT_B
from .confidence_sequence import IidBettingCS, WorBettingCS

TARGETS = ("population", "subset")
# strict: an unread reply counts as wrong (the grid's score). content: on a free-form configuration the oracle
# answers NaN for an item whose reply no seed read (else the mean over the read seeds), and the paired
# difference is d_i 1{both read}: its mean is P(both read) x E[d | both read], so it has the sign of who is
# better on the items both models' replies were read, and the same sequences certify that sign unchanged.
# Items either reply is unread on are still draws (they count 0), so the population target stays valid.
READINGS = ("strict", "content")
SHARE_CELLS = 200  # CrowS-Pairs: candidate shares every 0.005
# CrowS-Pairs' sign nulls as quadrants of (d, s) (rows of `_quadrant_max`): which side of 0 each null puts d and s
# on, +1 for ">= 0"; theta <= 0 is Q1 or Q3, theta >= 0 is Q2 or Q4
QUADRANTS = ((1, 1), (-1, -1), (-1, 1), (1, -1))


@dataclass(frozen=True)
class Reading:
    """Per pair of the configuration: the claim's inputs and what is reported."""

    lower: np.ndarray  # bounds of theta (a better when > 0)
    upper: np.ndarray
    estimate: np.ndarray  # theta on the items used
    exact: np.ndarray  # subset target, every item in: theta is known


def both_read(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The content reading's paired scores: each item as it is where both models' replies were read (neither
    score NaN), both 0 where either was not, so the difference is d_i 1{both read}."""
    both = ~(np.isnan(a) | np.isnan(b))
    return np.where(both, a, 0.0), np.where(both, b, 0.0)


def population_candidates(delta: float) -> tuple[float, ...]:
    """The differences a population claim tests at (theta = 0 and +-delta): grid points of its bank."""
    return (0.0, delta, -delta)


class PairedEvidence:
    """The pairs of one configuration. `population`: items available in its draw order."""

    def __init__(
        self,
        ideal: float | None,
        n_pairs: int,
        population: int,
        target: str,
        alpha_side: float,
        delta: float,
        lattice: int | None,
        shared: tuple[IidBettingCS, int] | None = None,
    ):
        """`ideal`: the score a better model sits closer to (CrowS-Pairs: 0.5), None where higher is better: the
        caller says which way is better, nothing here looks a benchmark up. `shared`: (a bank, this
        configuration's first row in it) for the population target of a benchmark where higher is better: every
        configuration's pairs are rows of one bank, so a round's draws go in with one call per draw (`stage`,
        then the caller's `bank.update`), not one per configuration."""
        if target not in TARGETS:
            raise ValueError(f"target {target!r}: one of {', '.join(TARGETS)}")
        self.target, self.delta, self.N = target, float(delta), int(population)
        self.alpha_side = float(alpha_side)
        self.ideal = ideal
        self.n_pairs = n_pairs
        self.t = np.zeros(n_pairs, dtype=np.int64)
        self.sum_a = np.zeros(n_pairs)
        self.sum_b = np.zeros(n_pairs)
        self.diff_sq = np.zeros(n_pairs)  # sum of squared paired differences (the planner's spread)
        # the last reading, running numbers and p-values with the draw counts they were made at: a round reads
        # every configuration, most of which took no new draw since the last
        self._memo: dict[str, tuple[tuple[int, int], object]] = {}
        both = 2 * n_pairs
        self.rows = np.arange(n_pairs)  # this configuration's rows of its bank
        self.shared = shared is not None
        # one of the two is kept: the population target's bank, or the subset target's sequences
        self.iid: IidBettingCS | None = None
        self.wor: WorBettingCS | None = None
        if target == "population":
            if self.ideal is None and shared is not None:
                self.iid, first = shared
                self.rows = np.arange(first, first + n_pairs)
            elif self.ideal is None:
                self.iid = IidBettingCS(n_pairs, alpha_side, -1.0, 1.0, extra=population_candidates(delta))
            else:
                self.iid = IidBettingCS(both, alpha_side, 0.0, 1.0, grid_points=SHARE_CELLS + 1, stakes="width")
                # the paired sign test: rows d = x_a - x_b, then s = x_a + x_b - 1, one-sided at 0 only
                self.signs = IidBettingCS(both, alpha_side, -1.0, 1.0, grid_points=2, extra=(0.0,))
                self._quadrant_max = np.zeros((n_pairs, len(QUADRANTS)))  # running maxima, log
        else:
            # the union bound's two-sided sequence at 2 alpha_side; CrowS: each share's at half that
            if self.ideal is None:
                self.wor = WorBettingCS(n_pairs, self.N, 2 * alpha_side, -1.0, 1.0, lattice)
            else:
                self.wor = WorBettingCS(both, self.N, alpha_side, 0.0, 1.0, lattice)

    @property
    def bank(self) -> IidBettingCS:
        if self.iid is None:
            raise ValueError("the subset target keeps no population bank")
        return self.iid

    @property
    def sequences(self) -> WorBettingCS:
        if self.wor is None:
            raise ValueError("the population target keeps no without-replacement sequences")
        return self.wor

    def update(self, pairs: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        staged = self.stage(pairs, a, b)
        if staged is not None:
            self.bank.update(*staged)

    def stage(self, pairs: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Take one draw for each of `pairs`; with a shared bank return (rows, values) for the caller to feed
        it, else feed this configuration's own sequences and return None."""
        pairs = np.asarray(pairs, dtype=np.int64)
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if np.any(self.t[pairs] >= self.N):
            raise ValueError("a stream drew more items than its configuration holds")
        staged = None
        own = self.iid if self.iid is not None else self.sequences
        if self.shared:
            staged = (self.rows[pairs], a - b)
        elif self.ideal is None:
            own.update(pairs, a - b)
        else:
            own.update(np.concatenate([pairs, pairs + self.n_pairs]), np.concatenate([a, b]))
            if self.iid is not None:
                self._sign_update(pairs, a, b)
        self.t[pairs] += 1
        self.sum_a[pairs] += a
        self.sum_b[pairs] += b
        self.diff_sq[pairs] += (a - b) ** 2
        return staged

    def _remembered(self, what: str, compute, own: bool = False):
        """compute() unless no draw went into this configuration (or, unless `own`, its bank) since it was last
        computed (`own`: what reads only this configuration's own sums)."""
        drawn = (int(self.t.sum()), int(self.iid.t.sum()) if self.iid is not None and not own else 0)
        held = self._memo.get(what)
        if held is None or held[0] != drawn:
            held = self._memo[what] = (drawn, compute())
        return held[1]

    # the planner's numbers, on theta's scale
    def running(self) -> tuple[np.ndarray, np.ndarray]:
        """(theta on the items so far, a spread of the paired differences) per pair."""
        return self._remembered("running", self._running, own=True)

    def _running(self) -> tuple[np.ndarray, np.ndarray]:
        t = np.maximum(self.t, 1)
        ma, mb = self.sum_a / t, self.sum_b / t
        theta = self._theta(ma, mb)
        d = ma - mb
        variance = np.maximum(self.diff_sq / t - d**2, 0.0) * t / np.maximum(t - 1, 1) + 1.0 / (t + 1)
        return np.where(self.t > 0, theta, 0.0), variance

    def _theta(self, ma, mb):
        if self.ideal is None:
            return ma - mb
        return np.abs(mb - self.ideal) - np.abs(ma - self.ideal)

    def reading(self) -> Reading:
        return self._remembered("reading", self._reading)

    def _reading(self) -> Reading:
        theta, _ = self.running()
        if self.target == "subset":
            bounds = self.sequences.bounds()
            exact = self.t >= self.N
            if self.ideal is None:
                lo, hi = bounds.lower, bounds.upper
            else:
                lo, hi = _closeness_box(
                    bounds.lower[: self.n_pairs],
                    bounds.upper[: self.n_pairs],
                    bounds.lower[self.n_pairs :],
                    bounds.upper[self.n_pairs :],
                    self.ideal,
                )
            return Reading(lo, hi, theta, exact)
        if self.ideal is None:
            lo, hi = self.bank.bounds(self.alpha_side)
            lo, hi = lo[self.rows], hi[self.rows]
        else:
            lo, hi = self._share_bounds()
        return Reading(lo, hi, theta, np.zeros(self.n_pairs, dtype=bool))

    def p_values(self) -> np.ndarray:
        """(pairs, 4) anytime p-values of NOT_A, NOT_B, HI, LO (population target)."""
        if self.target != "population":
            raise ValueError("p-values are kept for the population target")
        return self._remembered("p_values", self._p_values)

    def _p_values(self) -> np.ndarray:
        if self.ideal is None:
            d = self.delta  # NOT_A, NOT_B, HI, LO; the bank reads them once a round for all its configurations
            log_e = self.bank.log_e_table((("above", 0.0), ("below", 0.0), ("below", d), ("above", -d)))[self.rows]
        else:
            # the sign nulls on the paired items alone: averaging in the shares' e-value (valid too) decided fewer
            # claims in every scenario of perf/certify_crows_paired.md (81 against 77 of 120 at 1,000 items), since
            # where the paired test is slow the shares' is slower; the margin nulls stay the shares'
            log_e = self._share_log_e()
            log_e[:, [NOT_A, NOT_B]] = self._sign_log_e()
        return np.minimum(1.0, np.exp(-log_e))

    # CrowS-Pairs: theta = |p_b - ideal| - |p_a - ideal| from the two shares' cells
    def _cells(self):
        grid = self.bank.grid
        left, right = grid[:-1], grid[1:]
        inside = (left <= self.ideal) & (self.ideal <= right)
        dmin = np.where(inside, 0.0, np.minimum(np.abs(left - self.ideal), np.abs(right - self.ideal)))
        dmax = np.maximum(np.abs(left - self.ideal), np.abs(right - self.ideal))
        cells = self.bank.cell_log_e()
        return cells[: self.n_pairs], cells[self.n_pairs :], dmin, dmax

    def _sign_update(self, pairs: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """One paired draw into the sign test. A quadrant's e-process is the mean of the capitals against its two
        half-planes (d >= 0 or d <= 0, s likewise): each is a supermartingale anywhere in the quadrant, so their
        mean is too, and its running maximum is kept after every draw (Ville's inequality needs the maximum of
        the mean, not the mean of the two maxima)."""
        n = self.n_pairs
        self.signs.update(np.concatenate([pairs, pairs + n]), np.concatenate([a - b, a + b - 1.0]))
        at = self.signs.index_of(0.0)
        # against ">= 0" is the gambler betting below (log_minus), against "<= 0" the one betting above
        sides = {1: self.signs.log_minus[:, at], -1: self.signs.log_plus[:, at]}
        for q, (d_side, s_side) in enumerate(QUADRANTS):
            now = np.logaddexp(sides[d_side][pairs], sides[s_side][pairs + n]) - np.log(2.0)
            self._quadrant_max[pairs, q] = np.maximum(self._quadrant_max[pairs, q], now)

    def sign_log_e(self) -> np.ndarray:
        """(pairs, 2) log e-values of NOT_A and NOT_B from the paired sign test alone (a closeness benchmark, the
        population target): what certify reads for a lead, without the shares' boxes the margin nulls need."""
        if self.ideal is None or self.target != "population":
            raise ValueError("the paired sign test is kept for a closeness benchmark's population target")
        return self._sign_log_e()

    def _sign_log_e(self) -> np.ndarray:
        """(pairs, 2) log e-values of NOT_A (theta <= 0: Q1 or Q3) and NOT_B (Q2 or Q4): the smaller of the two
        quadrants' running maxima, since the truth lies in one of them."""
        m = self._quadrant_max
        return np.stack([np.minimum(m[:, 0], m[:, 1]), np.minimum(m[:, 2], m[:, 3])], axis=1)

    def _share_log_e(self) -> np.ndarray:
        """log e-values of the four composite nulls over the share pair (p_a, p_b). For a null region R, the
        e-process is (1/2) max of the two shares' hedged capitals at the true point (each share's is a test
        martingale, their mean is one, and it is at least half the larger), bounded below on every pair of
        cells that meets R; the smallest over those cells is an e-process for all of R."""
        ca, cb, dmin, dmax = self._cells()
        eps = 1e-12
        d = self.delta
        # (u, v) = (a, b) or (b, a); a cell pair meets a region when some point of it lies in the region
        # (borderline cells are counted in: the e-value can only get smaller)
        nearer = lambda u_min, u_max, v_min, v_max: v_min <= u_max + eps  # noqa: E731
        farther = lambda u_min, u_max, v_min, v_max: v_max >= u_min + d - eps  # noqa: E731
        not_a = _min_where(ca, cb, dmin, dmax, nearer)  # theta <= 0: b as near to the ideal as a, or nearer
        not_b = _min_where(cb, ca, dmin, dmax, nearer)  # theta >= 0
        hi = _min_where(ca, cb, dmin, dmax, farther)  # theta >= delta: b farther by delta
        lo = _min_where(cb, ca, dmin, dmax, farther)  # theta <= -delta
        return np.log(0.5) + np.stack([not_a, not_b, hi, lo], axis=1)

    def _share_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """theta's range over the box of cells neither share's sequence excludes (each at alpha_side / 2:
        a cell is excluded when its hedged capital's lower bound reaches 2 / alpha_side)."""
        ca, cb, dmin, dmax = self._cells()
        threshold = np.log(2.0 / self.alpha_side)
        lows, highs = [], []
        for i in range(self.n_pairs):
            keep_a, keep_b = ca[i] < threshold, cb[i] < threshold
            if not keep_a.any() or not keep_b.any():
                lows.append(-1.0)
                highs.append(1.0)
                continue
            lows.append(float(dmin[keep_b].min() - dmax[keep_a].max()))
            highs.append(float(dmax[keep_b].max() - dmin[keep_a].min()))
        return np.array(lows), np.array(highs)


def _min_where(cu, cv, dmin, dmax, meets) -> np.ndarray:
    """Per stream, min over cells u of max(cu[u], min over cells v with meets(u, v) of cv[v]): the e-value
    lower bound of a region of (u-share, v-share) cell pairs; +inf where no cell pair meets it."""
    ok = meets(dmin[:, None], dmax[:, None], dmin[None, :], dmax[None, :])  # (u cells, v cells)
    inner = np.where(ok[None, :, :], cv[:, None, :], np.inf).min(axis=2)  # (streams, u cells)
    return np.maximum(cu, inner).min(axis=1)


def _closeness_box(a_lo, a_hi, b_lo, b_hi, ideal) -> tuple[np.ndarray, np.ndarray]:
    """theta = |p_b - ideal| - |p_a - ideal| over the box [a_lo, a_hi] x [b_lo, b_hi]."""

    def dist_range(lo, hi):
        inside = (lo <= ideal) & (ideal <= hi)
        near = np.where(inside, 0.0, np.minimum(np.abs(lo - ideal), np.abs(hi - ideal)))
        return near, np.maximum(np.abs(lo - ideal), np.abs(hi - ideal))

    a_near, a_far = dist_range(a_lo, a_hi)
    b_near, b_far = dist_range(b_lo, b_hi)
    return b_near - a_far, b_far - a_near


def claims_from_rejections(rejected: np.ndarray) -> list[str]:
    """(pairs, 4) rejections -> claim per pair (a win before within_delta)."""
    out = []
    for row in rejected:
        if row[NOT_A]:
            out.append("a_better")
        elif row[NOT_B]:
            out.append("b_better")
        elif row[HI] and row[LO]:
            out.append("within_delta")
        else:
            out.append("undecided")
    return out
