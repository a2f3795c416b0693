"""TOST on 0/1 scores done by hand (the tests' independent computation of analysis/tost.py): two one-sided
exact binomial tests with scipy's binomtest on the discordant items, at the discordance's one-sided
Clopper-Pearson upper bound (level GAMMA), GAMMA added to each (Berger-Boos)."""

from __future__ import annotations

import numpy as np
from scipy.stats import beta, binomtest

GAMMA = 0.001


def tost_by_hand(differences, margin: float) -> float:
    d = np.asarray(differences, dtype=float)
    w, n = int((d > 0).sum()), len(d)
    m = w + int((d < 0).sum())
    upper = beta.ppf(1 - GAMMA, m + 1, n - m) if m < n else 1.0
    if margin >= upper:
        return GAMMA
    lower_side = binomtest(w, m, (1 - margin / upper) / 2, alternative="greater").pvalue + GAMMA
    upper_side = binomtest(w, m, (1 + margin / upper) / 2, alternative="less").pvalue + GAMMA
    return min(1.0, max(lower_side, upper_side))
