"""Which way is better, per benchmark, read from the benchmark's own definition (`Benchmark.better`
in safetyrepro_tasks: "higher", "lower", "closer_to_0" or "closer_to_0.5").

Every benchmark's grid score is an accuracy-like share where higher is better, except CrowS-Pairs:
its score is the share of pairs where the stereotypical sentence wins, 0.5 is unbiased, and a
model is better the closer it sits to 0.5 (|score - 0.5| lower is better).

The contract tables (`rho_flip.csv`, `orderings.csv`) read the raw score, highest first, as
docs/formats.md fixes them. Where better means higher, reading "better" instead changes nothing. For
CrowS-Pairs it does (|score - 0.5| is not monotone in the score), so the analysis adds a labelled
"better" reading beside the raw one. A benchmark the registry does not know (a grid under other
rules) is read as higher-is-better.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmarks.registry import get_benchmark

DISTANCE_DIGITS = 12  # distances are rounded so that scores symmetric about the target tie


@dataclass(frozen=True)
class Direction:
    name: str  # "higher", "lower", "closer_to_0", "closer_to_0.5"
    label: str  # how a table or caption says it
    target: float | None = None  # the ideal score when better means closer to it
    sign: float = 1.0  # -1 when lower is better
    target_note: str = ""  # what the target means, for the line drawn at it

    @property
    def comparative(self) -> str:
        """ "higher", "lower", "closer to 0.5": what a better model's score is."""
        return self.label.split(" is better")[0]

    @property
    def monotone(self) -> bool:
        """True when "better" orders models exactly as the raw score does (highest first)."""
        return self.target is None and self.sign > 0

    def better_value(self, scores):
        """Scores mapped so that a larger value is better (the identity when higher is better)."""
        if self.target is None:
            return (
                scores
                if self.sign > 0
                else -scores
                if isinstance(scores, pd.DataFrame | pd.Series)
                else -np.asarray(scores, dtype=float)
            )
        if isinstance(scores, pd.DataFrame | pd.Series):
            return -(scores - self.target).abs().round(DISTANCE_DIGITS)
        return -np.round(np.abs(np.asarray(scores, dtype=float) - self.target), DISTANCE_DIGITS)


HIGHER = Direction("higher", "higher is better")
DIRECTIONS = {
    "higher": HIGHER,
    "lower": Direction("lower", "lower is better", sign=-1.0),
    "closer_to_0": Direction("closer_to_0", "closer to 0 is better", target=0.0, target_note="0 = ideal"),
    "closer_to_0.5": Direction(
        "closer_to_0.5", "closer to 0.5 is better (0.5 = unbiased)", target=0.5, target_note="0.5 = unbiased"
    ),
}


@cache
def has_pass_fail(benchmark: str) -> bool:
    """Whether a score threshold reads as pass/fail (the compliance-flip rate): only where higher is
    better; a benchmark whose ideal is a target value (CrowS-Pairs' 0.5) has none."""
    return direction(benchmark).monotone


def score_meaning(benchmark: str) -> str:
    """What the benchmark's headline score is, as its definition says ("" for a plain accuracy)."""
    try:
        return get_benchmark(benchmark).score_meaning
    except UserError:
        return ""


def declared_direction(benchmark: str) -> Direction:
    """The direction the benchmark's definition declares; a name the registry does not know is refused
    (`UserError`), for readers that must not guess (certify's sequences)."""
    declared = get_benchmark(benchmark).better
    if declared not in DIRECTIONS:
        raise UserError(f"{benchmark}: its definition says better is {declared!r}, not one of {', '.join(DIRECTIONS)}")
    return DIRECTIONS[declared]


def direction(benchmark: str) -> Direction:
    try:
        declared = get_benchmark(benchmark).better
    except UserError:
        return HIGHER
    return DIRECTIONS.get(declared, HIGHER)
