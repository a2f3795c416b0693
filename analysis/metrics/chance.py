"""The chance reference for rho_flip: what it would be if the configurations said nothing about
which model is better.

Null: on each of n configurations the two models' scores are exchangeable and never tie, so each
configuration is a fair coin for who wins, independently. Then K = N+ ~ Binomial(n, 1/2) and

    chance(n) = E[min(K, n - K)] / n

which is 0.3125 at n = 4, 0.387 at n = 12 and 0.443 at n = 48: well below the ceiling
floor(n/2)/n, because a fair coin rarely splits exactly evenly. A pair's rho_flip near chance says
its wins are as mixed as coin flips; near 0 says one model leads almost everywhere.

The headline reads the maximum over the M(M-1)/2 model pairs, which is larger under the same null
(every configuration ranks the M models uniformly at random): 0.476 at n = 48 for M = 3. It is
computed exactly for M = 3 (the joint law of the three pair counts), from the pair formula for
M = 2, and by a seeded simulation for M >= 4.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
from scipy.stats import binom

SIMULATED_DRAWS = 20_000  # M >= 4: Monte Carlo error about 0.001


@cache
def chance_rho_flip(n: int) -> float:
    """E[min(K, n-K)]/n for K ~ Binomial(n, 1/2): one pair under exchangeable untied scores."""
    if n < 1:
        return float("nan")
    k = np.arange(n + 1)
    return float(np.sum(binom.pmf(k, n, 0.5) * np.minimum(k, n - k)) / n)


def _pair_patterns(n_models: int) -> list[tuple[int, ...]]:
    """For every total order of the models, which pairs (i < j) have i above j."""
    pairs = list(itertools.combinations(range(n_models), 2))
    out = []
    for order in itertools.permutations(range(n_models)):
        rank = {m: r for r, m in enumerate(order)}
        out.append(tuple(int(rank[i] < rank[j]) for i, j in pairs))
    return out


@cache
def chance_rho_flip_max(n: int, n_models: int) -> float:
    """E[max over model pairs of min(N+, N-)]/n when every configuration ranks the models uniformly
    at random: exact for two and three models, simulated (seeded) for more."""
    if n < 1 or n_models < 2:
        return float("nan")
    if n_models == 2:
        return chance_rho_flip(n)
    if n_models == 3:
        law = np.zeros((n + 1,) * 3)  # joint law of (N+ of pair 01, of pair 02, of pair 12)
        law[0, 0, 0] = 1.0
        for _ in range(n):
            step = np.zeros_like(law)
            for p in _pair_patterns(3):
                step[p[0] :, p[1] :, p[2] :] += law[: n + 1 - p[0], : n + 1 - p[1], : n + 1 - p[2]] / 6
            law = step
        k = np.arange(n + 1)
        minority = np.minimum(k, n - k)
        worst = np.maximum(np.maximum(minority[:, None, None], minority[None, :, None]), minority[None, None, :])
        return float(np.sum(law * worst) / n)
    return _simulated_max(n, n_models)


SIMULATED_BLOCK = 1 << 21  # uniforms drawn at once (whole draws of configurations x models), 16 MB


def _simulated_max(n: int, n_models: int) -> float:
    """The seeded simulation: SIMULATED_DRAWS draws of n x n_models uniform scores (drawn in blocks of
    whole draws, which is the same stream as drawing them at once), each scored by the largest
    min(K, n - K) over the pairs. Every draw's value is a whole number, so their sum is exact and the
    mean does not depend on the order; a draw stops being compared once a pair reaches floor(n/2),
    which no pair can exceed (with many models almost every draw gets there within a few pairs)."""
    rng = np.random.default_rng([n, n_models])
    # the maximum does not depend on the order of the pairs: disjoint pairs first, so that the first
    # blocks read few columns of each draw
    disjoint = [(i, i + 1) for i in range(0, n_models - 1, 2)]
    rest = [p for p in itertools.combinations(range(n_models), 2) if p[1] != p[0] + 1 or p[0] % 2]
    pairs = np.array(disjoint + rest, dtype=np.intp)
    top = n // 2
    per_block = max(1, SIMULATED_BLOCK // (n * n_models))
    total = 0
    for start in range(0, SIMULATED_DRAWS, per_block):
        active = rng.random((min(per_block, SIMULATED_DRAWS - start), n, n_models))
        best = np.zeros(len(active), dtype=np.int64)
        open_ = np.arange(len(active))
        first, size = 0, 8
        while first < len(pairs):
            block = pairs[first : first + size]
            first, size = first + size, size * 2
            k = np.count_nonzero(active[:, :, block[:, 0]] > active[:, :, block[:, 1]], axis=1)
            best[open_] = np.maximum(best[open_], np.minimum(k, n - k).max(axis=1))
            still = best[open_] < top
            if not still.all():
                open_, active = open_[still], active[still]
                if not len(open_):
                    break
        total += int(best.sum())
    return float(np.float64(total) / SIMULATED_DRAWS / n)


def ceiling(n: int) -> float:
    """The largest value rho_flip can take over n configurations (paper Prop. 1 (iii))."""
    return (n // 2) / n if n else float("nan")
