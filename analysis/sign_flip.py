"""The exact paired sign-flip test over items, the one every paired comparison runs (analyze's item tests,
`verdict`, the content reading): under the null that the two models are exchangeable on every item, each
item's difference d_i is as likely to be +|d_i| as -|d_i|, and the p-value of the observed sum is read off
the exact law of sum(+-|d_i|). For 0/1 item scores this is the exact McNemar test on the discordant items;
seed-averaged item scores (multiples of 1/5) are handled exactly on their lattice (exact.py)."""

from __future__ import annotations

import heapq
from functools import lru_cache

import numpy as np
from scipy.stats import binom

from .exact import as_integers, lattice_of

FALLBACK_LATTICE = 1000  # differences on no small lattice are rounded to 0.001 (the test stays exact for them)


def exact_mean(values: np.ndarray) -> float:
    """The mean of item scores (or differences) on their lattice, summed as whole numbers: a sum that
    is 0 as a fraction is 0.0, never 1e-17."""
    ints, lattice = as_integers(values)
    return float(ints.sum() / (len(ints) * lattice)) if len(ints) else float("nan")


def _integer_weights(magnitudes: np.ndarray) -> np.ndarray:
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


def _subset_sum_law(weights: np.ndarray, p: float = 0.5) -> np.ndarray:
    """Law of U = sum of w_i over a random subset (each item in with probability p, 1/2 under the
    test's null; power.detectable_from_differences reads other p): index u -> P(U = u)."""
    law = np.ones(1)
    values, counts = np.unique(weights, return_counts=True)
    if len(values) > 1 and int(weights.sum()) * len(values) > BALANCED_ABOVE:
        return _balanced_law(values, counts, p)
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


def _balanced_law(values: np.ndarray, counts: np.ndarray, p: float) -> np.ndarray:
    """The same law as `_subset_sum_law`'s loop, for many distinct weights (fractional scores on the 1/1000
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
    w = _integer_weights(np.abs(d))
    keep = w > 0
    w, positive = w[keep], d[keep] > 0
    total = int(w.sum())
    if total == 0:
        return 1.0
    law = _subset_sum_law(w)  # sum(d) = 2U - total, with U the weight of the positive items
    observed = abs(2 * int(w[positive].sum()) - total)
    extreme = np.abs(2 * np.arange(total + 1) - total) >= observed
    return float(min(1.0, law[extreme].sum()))
