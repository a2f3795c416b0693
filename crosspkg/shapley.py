"""Exact Shapley values over a handful of axis switches.

A walk from stack A to stack B switches the axes on which they differ, one at a time. With the
set D of differing axes and v(S) the score of the configuration that takes B's value on the axes
in S and A's elsewhere,

    phi_i = sum over S ⊆ D \\ {i} of |S|! (k - |S| - 1)! / k! * (v(S ∪ {i}) - v(S)),  k = |D|,

the average over all k! orderings of the marginal change when axis i is switched. The values add up
exactly to v(D) - v(∅) (efficiency); axes on which A and B agree get 0 and are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import combinations, permutations
from math import factorial


def subsets(players: Sequence[Hashable]):
    for r in range(len(players) + 1):
        yield from (frozenset(c) for c in combinations(players, r))


def shapley(players: Sequence[Hashable], value: Callable[[frozenset], float]) -> dict:
    """Exact Shapley values by the subset formula; `value` is called once per subset."""
    players = list(players)
    k = len(players)
    v = {s: float(value(s)) for s in subsets(players)}
    out = {}
    for i in players:
        others = [p for p in players if p != i]
        total = 0.0
        for s in subsets(others):
            w = factorial(len(s)) * factorial(k - len(s) - 1) / factorial(k)
            total += w * (v[s | {i}] - v[s])
        out[i] = total
    return out


def shapley_by_orderings(players: Sequence[Hashable], value: Callable[[frozenset], float]) -> dict:
    """The same values as the average over all k! orderings (a check on `shapley`; small k only)."""
    players = list(players)
    out = {p: 0.0 for p in players}
    orders = list(permutations(players))
    cache: dict[frozenset, float] = {}

    def v(s):
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    for order in orders:
        s: frozenset = frozenset()
        for p in order:
            out[p] += v(s | {p}) - v(s)
            s = s | {p}
    return {p: x / len(orders) for p, x in out.items()}
