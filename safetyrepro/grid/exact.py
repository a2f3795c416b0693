"""The one comparison rule every verdict uses: scores are compared as the fractions they are.

A cell's score is a count of correct item x seed answers over n_items x n_seeds (a sampled cell's
score is a mean of its seeds' shares, summed in floating point). Two models with the same count but
a different split over the seeds get floats that differ by ~1e-16, and a strict `>` on the raw
floats would call that a win. So every score is first mapped to the fraction it stands for:

- A score s of a cell with N = n_items x n_seeds answers is on the cell's lattice when s is within
  SCORE_TOLERANCE of a fraction k / (N L) for some L in 1..LATTICE_MAX (L > 1 holds fractional
  credit: a logprob item whose top candidates tie is credited 1/ties). It becomes the float k / (N L).
  IEEE division is correctly rounded, so equal fractions give the identical float whatever N and L
  they were written with, and fractions that differ (by one item's worth or less) give different
  floats: plain `>`, `<` and `==` on the mapped values are exact.
- A score on no such lattice (a hand-written or imported grid whose floats carry no count) is rounded
  to FLOAT_DIGITS decimals, so differences below float noise are ties and any larger one is not.

Item-level arithmetic (the pair null, the item bootstrap, the paired tests' differences) works the
same way: item scores are seed means on a lattice 1/L, so sums are done on the integers k = x L and
only divided at the end.
"""

from __future__ import annotations

import math

import numpy as np

LATTICE_MAX = 120  # lcm(1..5) twice over: ties among up to 5 candidates, on top of the seed count
SCORE_TOLERANCE = 1e-12  # a float mean of a few thousand shares is within ~1e-15 of its fraction
ITEM_TOLERANCE = 1e-9  # per lattice step: an item's seed mean as a live run sums it
FLOAT_DIGITS = 12  # scores with no count are compared to 1e-12
EXACT_RULE = (
    "scores compared as fractions of each cell's n_items x n_seeds answers (equal counts tie, one answer "
    "apart do not); a score on no such fraction is compared to 1e-12"
)


def exact_scores(scores, n_items, n_seeds) -> np.ndarray:
    """Each score as the float of the fraction k / (n_items x n_seeds x L) it stands for (see the
    module docstring); scores on no lattice are rounded to FLOAT_DIGITS decimals. NaN stays NaN."""
    s = np.asarray(scores, dtype=float)
    n = np.broadcast_to(np.asarray(n_items, dtype=float) * np.asarray(n_seeds, dtype=float), s.shape)
    out = np.round(s, FLOAT_DIGITS)
    todo = np.isfinite(s) & np.isfinite(n) & (n >= 1)
    for lattice in range(1, LATTICE_MAX + 1):
        if not todo.any():
            break
        denominator = n * lattice
        k = s * denominator
        hit = todo & (np.abs(k - np.rint(k)) <= SCORE_TOLERANCE * denominator)
        out[hit] = np.rint(k[hit]) / denominator[hit]
        todo &= ~hit
    return out


def item_lattice(n_seeds: int, ties: int | None = None) -> int:
    """L such that an item's score, a mean over `n_seeds` seeds, is a multiple of 1/L: 1/n_seeds for
    whole credits, finer for a logprob item whose credit is shared among up to `ties` tied candidates (the
    `expected` tie rule: 1/k each), lcm(1..ties) times finer."""
    return n_seeds if not ties else math.lcm(n_seeds, math.lcm(*range(1, ties + 1)))


def on_lattice(values, lattice: int, tolerance: float = SCORE_TOLERANCE) -> bool:
    """Whether every value is a multiple of 1/lattice, to within `tolerance` of one step of it."""
    k = np.asarray(values, dtype=float) * lattice
    return bool(np.all(np.abs(k - np.rint(k)) <= tolerance * lattice))


def lattice_of(values, tolerance: float = SCORE_TOLERANCE) -> int | None:
    """The smallest L <= LATTICE_MAX with every value within `tolerance` x L of a multiple of 1/L; None
    when there is none (item scores that are no seed mean of shares)."""
    v = np.unique(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    return next((lattice for lattice in range(1, LATTICE_MAX + 1) if on_lattice(v, lattice, tolerance)), None)


def as_integers(values) -> tuple[np.ndarray, int]:
    """(k, L): the values as whole numbers k = x L on their lattice, so that sums and differences are
    exact; values on no lattice are rounded to 1/10**6 (L = 10**6), which keeps their order."""
    x = np.asarray(values, dtype=float)
    lattice = lattice_of(x) or 10**6
    return np.rint(x * lattice), lattice


def snap_items(values) -> np.ndarray:
    """Item scores as the exact floats of their lattice fractions (equal fractions, identical floats)."""
    x = np.asarray(values, dtype=float)
    lattice = lattice_of(x)
    if lattice is None:
        return np.round(x, FLOAT_DIGITS)
    return np.rint(x * lattice) / lattice
