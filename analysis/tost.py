"""Equivalence at a margin (TOST): are two models' paired scores within M of each other, as a claim about the
models (the items as draws from the task)?

Two one-sided tests, each at level alpha: H0- "E <= -M" and H0+ "E >= M", E the true mean paired
difference A - B. Both rejected: |E| < M (the intersection-union test, Berger 1982: no alpha is split). The
TOST p-value is the larger of the two.

0/1 item scores (differences in {-1, 0, 1}), exact. Given the number m of discordant items among n, the W
items won by A are Bin(m, p) with p = (1 + E/D)/2, D the true discordance. D is a nuisance: at the margin
E = -M, p = (1 - M/D)/2 grows with D, so the test is run at D's one-sided Clopper-Pearson upper bound D_u
(level GAMMA) and GAMMA is added to the p-value (Berger & Boos 1994): P(reject) <= P(D > D_u) + the
binomial test's level, so the test holds its level whatever D is, unconditionally (not only for these
items' discordance). By hand:

    D_u = scipy.stats.beta.ppf(1 - GAMMA, m + 1, n - m)
    p-  = binomtest(W, m, (1 - M / D_u) / 2, alternative="greater").pvalue + GAMMA
    p+  = binomtest(W, m, (1 + M / D_u) / 2, alternative="less").pvalue + GAMMA

(M >= D_u: the null is impossible for every D the data allow, p = GAMMA.)

Other bounded scores (epoch means, partial credit): each side is the anytime p-value of the betting
e-process that `certify` and the early-stopping manager use (confidence_sequence.IidBettingCS, the
population target), fed the items in a fixed order (their ids, sorted): valid for any distribution on
[-1, 1], conservative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import beta, binom

from .confidence_sequence import IidBettingCS

GAMMA = 0.001  # Berger-Boos: the level of the discordance's upper bound, added to each p-value
EXACT = "exact binomial on the discordant items at the margin (Berger-Boos, discordance at its 99.9 % upper bound)"
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


def discordance_upper(m: int, n: int, gamma: float = GAMMA) -> float:
    """One-sided Clopper-Pearson upper bound (level gamma) of the share of discordant items."""
    return 1.0 if m >= n else float(beta.ppf(1 - gamma, m + 1, n - m))


def tost(differences, margin: float, alpha: float = 0.05) -> Tost:
    """Both one-sided tests of |E| < margin on one comparison's paired differences A - B (in [-1, 1]).
    `alpha` only tunes the betting stakes of the non-binary case (the e-process is valid at every level)."""
    d = np.asarray(differences, dtype=float)
    if not 0 < margin < 1:
        raise ValueError(f"margin {margin} must be in (0, 1)")
    if len(d) == 0:
        return Tost(margin, 1.0, 1.0, EXACT)
    if is_binary(d):
        return _exact(d, margin)
    return _betting(d, margin, alpha)


def _exact(d: np.ndarray, margin: float) -> Tost:
    wins, losses, n = int((d > 0).sum()), int((d < 0).sum()), len(d)
    m = wins + losses
    upper = discordance_upper(m, n)
    if margin >= upper:  # |E| <= D <= D_u < M for every D the data allow
        return Tost(margin, GAMMA, GAMMA, EXACT)
    shift = margin / upper
    p_lower = float(binom.sf(wins - 1, m, (1 - shift) / 2)) if m else 1.0  # P(W' >= W)
    p_upper = float(binom.cdf(wins, m, (1 + shift) / 2)) if m else 1.0  # P(W' <= W)
    return Tost(margin, min(1.0, p_lower + GAMMA), min(1.0, p_upper + GAMMA), EXACT)


def _betting(d: np.ndarray, margin: float, alpha: float) -> Tost:
    cs = IidBettingCS(1, alpha, -1.0, 1.0, extra=(margin, -margin))
    for value in d:
        cs.update([0], [value])
    p_lower = float(min(1.0, np.exp(-cs.log_e_above(-margin)[0])))  # against "E <= -M"
    p_upper = float(min(1.0, np.exp(-cs.log_e_below(margin)[0])))  # against "E >= M"
    return Tost(margin, p_lower, p_upper, BETTING)
