"""Which way is better, per benchmark, in one place.

Every benchmark's grid score is an accuracy-like share where higher is better, except CrowS-Pairs:
its score is the share of pairs where the stereotypical sentence wins, 0.5 is unbiased, and a
model is better the closer it sits to 0.5 (|score - 0.5| lower is better).

The contract tables (`rho_flip.csv`, `orderings.csv`) read the raw score, highest first, as
DESIGN.md fixes them. For a benchmark whose direction is a monotone function of the score
(`higher`), reading "better" instead changes nothing. For CrowS-Pairs it does (|score - 0.5| is
not monotone in the score), so the analysis adds a labelled "better" reading beside the raw one.

The natural home of this attribute is the benchmark definition (safetyrepro_tasks/benchmarks/);
until it moves there, `BETTER` maps benchmark names to their direction, defaulting to `higher`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DISTANCE_DIGITS = 12


@dataclass(frozen=True)
class Direction:
    name: str          # "higher" or "closer_to_0.5"
    label: str         # how a table or caption says it
    target: float | None = None  # the ideal score when better means closer to it

    @property
    def monotone(self) -> bool:
        """True when "better" orders models exactly as the raw score does (highest first)."""
        return self.target is None

    def better_value(self, scores):
        """Scores mapped so that a larger value is better (the identity for `higher`)."""
        if self.target is None:
            return scores
        # rounded so that scores symmetric about the target tie (|0.3 - 0.5| == |0.7 - 0.5|)
        if isinstance(scores, pd.DataFrame | pd.Series):
            return -(scores - self.target).abs().round(DISTANCE_DIGITS)
        return -np.round(np.abs(np.asarray(scores, dtype=float) - self.target), DISTANCE_DIGITS)


HIGHER = Direction("higher", "higher is better")
CLOSER_TO_HALF = Direction("closer_to_0.5", "closer to 0.5 is better (0.5 = unbiased)", target=0.5)

BETTER: dict[str, Direction] = {"crows_pairs": CLOSER_TO_HALF}


def direction(benchmark: str) -> Direction:
    return BETTER.get(benchmark, HIGHER)
