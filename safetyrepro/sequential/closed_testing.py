"""Familywise claims about many real parameters at once, at every stopping time: a closed test with
Bonferroni local tests over the four one-sided hypotheses of each parameter.

Each parameter theta_j (a configuration's paired difference, or CrowS-Pairs' difference in closeness to
0.5) carries four hypotheses, in this column order:

    0 NOT_A   theta <= 0       rejected: a is better
    1 NOT_B   theta >= 0       rejected: b is better
    2 HI      theta >= delta   rejected, with LO: within delta
    3 LO      theta <= -delta

At most two of them hold together (theta >= delta: NOT_B and HI; 0 < theta < delta: NOT_B; theta = 0:
NOT_A and NOT_B; and the mirror images), so an intersection of hypotheses is possible only when it takes
at most two per parameter, and those two one of the pairs (NOT_B, HI), (NOT_A, NOT_B), (NOT_A, LO).
Closed testing rejects H when every possible intersection that contains it is rejected by its local
Bonferroni test (some member's p-value <= alpha / size). That is Holm's step-down with the logic of
the family used (Shaffer): never less powerful than Bonferroni at alpha / (2 K) per hypothesis, which
is what a union bound over K two-sided confidence sequences spends, and often more.

Validity under any dependence and at every stopping time: each p-value is an anytime p-value
(1 / the running maximum of an e-process over a path fixed in advance), so it only falls as items come
in and is valid at the path's end; the closed test is monotone (smaller p-values never undo a
rejection), so what it rejects at any time is a subset of what it would reject on the whole paths,
whose familywise error is at most alpha.
"""

from __future__ import annotations

import numpy as np

NOT_A, NOT_B, HI, LO = 0, 1, 2, 3
PAIRS_TRUE_TOGETHER = ((NOT_B, HI), (NOT_A, NOT_B), (NOT_A, LO))


def closed_test(p_values: np.ndarray, alpha: float) -> np.ndarray:
    """(K, 4) anytime p-values -> (K, 4) booleans: which hypotheses the closed test rejects.

    H is kept when some size s has p_H > alpha / s and s possible-together hypotheses, H among them,
    all with p > alpha / s (that intersection's Bonferroni test fails). The largest such set takes, from
    every other parameter, its largest possible-together subset of failing hypotheses (0, 1 or 2), and
    from H's own parameter H and at most one partner."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 2 or p.shape[1] != 4:
        raise ValueError("closed_test takes a (K, 4) array of p-values")
    k = len(p)
    if k == 0:
        return np.zeros_like(p, dtype=bool)
    kept = np.zeros_like(p, dtype=bool)
    # the largest failing set only grows at sizes where some p-value starts to fail (s > alpha / p), and
    # between those it is constant while s grows: the first size of each step is the one to try
    with np.errstate(divide="ignore"):
        starts = np.floor(alpha / p).astype(float) + 1
    sizes = np.unique(np.clip(starts[np.isfinite(starts)], 1, 2 * k)).astype(int)
    for s in sizes:
        failing = p > alpha / s
        if not failing.any():
            continue
        pair_fails = np.zeros(k, dtype=bool)
        for i, j in PAIRS_TRUE_TOGETHER:
            pair_fails |= failing[:, i] & failing[:, j]
        per_param = np.where(pair_fails, 2, np.where(failing.any(axis=1), 1, 0))
        total = int(per_param.sum())
        for h in range(4):
            partners = [j for pair in PAIRS_TRUE_TOGETHER if h in pair for j in pair if j != h]
            partner = np.zeros(k, dtype=bool)
            for j in partners:
                partner |= failing[:, j]
            largest = total - per_param + 1 + partner.astype(int)
            kept[:, h] |= failing[:, h] & (largest >= s)
    return ~kept


def closed_test_each(p_values: np.ndarray, alpha: float) -> np.ndarray:
    """(S, 4) anytime p-values of S parameters, each its own family -> (S, 4) rejections: `closed_test` of
    every row alone, at once (many independent streams: the early-stopping rule, its checks on synthetic
    streams). With one parameter the intersections holding H are {H} (level alpha) and H with each
    hypothesis that can hold beside it (Bonferroni, alpha / 2)."""
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 2 or p.shape[1] != 4:
        raise ValueError("closed_test_each takes an (S, 4) array of p-values")
    rejected = p <= alpha
    for h in range(4):
        for pair in PAIRS_TRUE_TOGETHER:
            if h in pair:
                j = pair[1] if pair[0] == h else pair[0]
                rejected[:, h] &= np.minimum(p[:, h], p[:, j]) <= alpha / 2
    return rejected
