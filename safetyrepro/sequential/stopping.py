"""Anytime-valid stopping rules for an evaluation that is still running, on the confidence sequences of
`certify`'s population target (sequential/confidence_sequence.py, IidBettingCS: the betting e-processes of
Waudby-Smith & Ramdas for the mean of i.i.d. bounded values). Samples are draws from the task, so the claims
are about the model(s), not about the items that happened to run; they hold at whatever sample the run stops,
which is what makes stopping early safe.

Two rules:
- `mean`: stop when the task's mean score is known to within `width`: the two-sided confidence sequence at
  level alpha (alpha/2 a side) is at most `width` wide. What holds (COVERAGE): over all runs, each read at
  its stop or, if it never stopped, at its end, the interval misses the true mean with probability at most
  alpha (the sequence holds at every sample at once). Read only among the runs that stopped, the miss rate
  can be larger, since stopping on a narrow interval favours runs whose early samples happen to vary little:
  it is at most alpha / P(stop), so a stop that is rare for the task says less than one that is common.
- `paired`: each sample's score minus a reference run's score on the same sample (another model); stop when
  the difference is certified: the four one-sided hypotheses of certify (difference <= 0, >= 0, >= margin,
  <= -margin) are tested with their anytime p-values and closed testing at alpha (closed_testing.closed_test_each,
  each stream its own family),
  and the claims read as certify reads them (sequential/evidence.claims_from_rejections): `a_better` (the
  evaluated model), `b_better` (the reference), or, with a margin, `within_delta`. A wrong claim is made with
  probability at most alpha, at any stop.

Vectorised over streams, so the guarantee can be checked on many synthetic streams at once with the very
code an evaluation runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .closed_testing import HI, LO, NOT_A, NOT_B, closed_test_each
from .confidence_sequence import IidBettingCS
from .evidence import claims_from_rejections

MODES = ("mean", "paired")
MIN_GRID = 201  # candidates of the confidence sequence: at least every 1/200 of the range
STEPS_PER_WIDTH = 8  # and at least this many per `width`, so bounds read on the grid lose little of it
UNDECIDED = "undecided"
KNOWN = "known"
COVERAGE = {
    "mean": "over all runs, each read at its stop or at its end, the interval misses the true mean with "
    "probability at most alpha; among the runs that stop, at most alpha / P(stop): stopping on a narrow interval "
    "favours runs whose early samples vary little, so a rare stop says less",
    "paired": "a wrong claim (better, worse, within the margin) comes with probability at most alpha, at whatever "
    "sample the run stops",
}
BIASED = (
    "the mean of the samples before a stop the data chose is biased (a run stops when its estimate is far from the "
    "rule's boundary): the interval is the claim, not the estimate"
)


@dataclass(frozen=True)
class StoppingRule:
    """What to stop on. Scores lie in [low, high] (a paired difference in [low - high, high - low])."""

    mode: str
    alpha: float = 0.05
    width: float | None = None  # mean: stop when the interval is at most this wide
    margin: float | None = None  # paired: also stop when the difference is certified within +-margin
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r}: one of {', '.join(MODES)}")
        for name in ("alpha", "low", "high", "width", "margin"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
                raise ValueError(f"{name} {value!r}: must be a finite number")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha} must be in (0, 1)")
        if not self.high > self.low:
            raise ValueError(f"scores in [{self.low}, {self.high}]: low must be below high")
        span = self.high - self.low
        if self.mode == "mean" and (self.width is None or not 0 < self.width < span):
            raise ValueError(f"width {self.width}: the mean rule needs a width in (0, {span:g})")
        if self.mode == "paired" and self.width is not None:
            raise ValueError("width is for the mean rule; the paired rule stops on a certified difference")
        if self.mode == "mean" and self.margin is not None:
            raise ValueError("margin is for the paired rule")
        if self.margin is not None and not 0 < self.margin < span:
            raise ValueError(f"margin {self.margin} must be in (0, {span:g})")

    @property
    def span(self) -> float:
        return self.high - self.low

    def describe(self) -> str:
        if self.mode == "mean":
            return f"stop when the mean is known within {self.width:g} (confidence {1 - self.alpha:g})"
        within = f", or within +-{self.margin:g}" if self.margin is not None else ""
        return f"stop when the paired difference to the reference is certified nonzero{within} (alpha {self.alpha:g})"


@dataclass(frozen=True)
class Decisions:
    """Per stream, where it stands now."""

    n: np.ndarray  # values taken
    estimate: np.ndarray  # their mean
    lower: np.ndarray  # the confidence sequence's bounds now (level 1 - alpha, two-sided)
    upper: np.ndarray
    claim: np.ndarray  # KNOWN / UNDECIDED (mean), a_better / b_better / within_delta / UNDECIDED (paired)
    p_values: np.ndarray  # (streams, 4) paired: anytime p-values of NOT_A, NOT_B, HI, LO; mean: empty

    @property
    def stop(self) -> np.ndarray:
        return self.claim != UNDECIDED


class SequentialRule:
    """`rule` applied to `n_streams` streams of values (scores, or paired differences A - B)."""

    def __init__(self, rule: StoppingRule, n_streams: int = 1):
        self.rule = rule
        if rule.mode == "mean":
            points = max(MIN_GRID, math.ceil(STEPS_PER_WIDTH * rule.span / float(rule.width or rule.span)) + 1)
            self.cs = IidBettingCS(n_streams, rule.alpha / 2, rule.low, rule.high, grid_points=points, stakes="width")
        else:
            extra = (0.0,) if rule.margin is None else (0.0, rule.margin, -rule.margin)
            self.cs = IidBettingCS(n_streams, rule.alpha / 2, -rule.span, rule.span, grid_points=MIN_GRID, extra=extra)

    def update(self, streams, values) -> None:
        """One new value for each of `streams` (distinct indices)."""
        v = np.asarray(values, dtype=float)
        lo, hi = (self.rule.low, self.rule.high) if self.rule.mode == "mean" else (-self.rule.span, self.rule.span)
        if np.any((v < lo - 1e-12) | (v > hi + 1e-12)) or np.any(~np.isfinite(v)):
            bad = v[(v < lo - 1e-12) | (v > hi + 1e-12) | ~np.isfinite(v)][0]
            raise ValueError(f"value {bad} is outside [{lo:g}, {hi:g}], the range the rule was given")
        self.cs.update(streams, v)

    def p_values(self) -> np.ndarray:
        """(streams, 4) anytime p-values of NOT_A, NOT_B, HI, LO (paired rule)."""
        cs, m = self.cs, self.rule.margin
        log_e = np.zeros((len(cs.t), 4))
        log_e[:, NOT_A] = cs.log_e_above(0.0)
        log_e[:, NOT_B] = cs.log_e_below(0.0)
        if m is not None:
            log_e[:, HI] = cs.log_e_below(m)
            log_e[:, LO] = cs.log_e_above(-m)
        return np.minimum(1.0, np.exp(-log_e))

    def decide(self, streams=None) -> Decisions:
        """Where `streams` (default: all) stand now, in that order."""
        cs, rule = self.cs, self.rule
        rows = np.arange(len(cs.t)) if streams is None else np.asarray(streams, dtype=np.int64)
        lower, upper = (x[rows] for x in cs.bounds(rule.alpha / 2))
        n = cs.t[rows].copy()
        estimate = np.where(n > 0, cs.low + (cs.high - cs.low) * cs.total[rows] / np.maximum(n, 1), np.nan)
        if rule.mode == "mean":
            known = (upper - lower <= float(rule.width or 0) + 1e-12) & (n > 0)
            claim = np.where(known, KNOWN, UNDECIDED).astype(object)
            return Decisions(n, estimate, lower, upper, claim, np.zeros((len(n), 0)))
        p = self.p_values()[rows]
        claim = np.array(claims_from_rejections(closed_test_each(p, rule.alpha)), dtype=object)  # one family a stream
        return Decisions(n, estimate, lower, upper, claim, p)
