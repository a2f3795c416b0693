"""Clusters as the population target's draws (issue 57: `certify replay --cluster FIELD`).

Items that come in groups (questions on one passage, fills of one template) are not independent draws: a cluster
that suits one model moves all its items together, and sequences that read each item as a draw then claim
differences that are not there (tests/certify/test_certify_clusters_57.py measures it on clustered nulls). With
clusters named, the draws are the clusters: each configuration's sequence takes one value per cluster, the mean of
its items' scores (both models on the same items), drawn in a random order of the clusters. The claims are then
about the models on clusters like these, drawn from the benchmark's population of clusters, and the difference
they bound is the mean over clusters of each cluster's mean item difference (the item-weighted mean where
clusters are of one size). This is a wrapper around the problem and the oracle: the sequences, the closed test
and the allocation are certify's own, with a cluster where they had an item.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .algorithm import BenchmarkProblem
from .oracle import Oracle, Request, as_oracle


def cluster_members(item_ids: Sequence[str], cluster_of: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """cluster -> its items, clusters in the order their first item comes, items in the problem's order."""
    members: dict[str, list[str]] = {}
    for item in item_ids:
        members.setdefault(str(cluster_of[item]), []).append(item)
    return {c: tuple(items) for c, items in members.items()}


def clustered_problem(problem: BenchmarkProblem, members: Mapping[str, tuple[str, ...]]) -> BenchmarkProblem:
    """The problem with its clusters as the items: a cluster's score is a mean, so no lattice."""
    if problem.excluded or problem.family_configs:
        raise ValueError("clusters as draws take a fixed choice of configurations (no selection by looking)")
    return dataclasses.replace(problem, item_ids=tuple(members), lattice=None, ideal=problem.closer_to)


class ClusterOracle(Oracle):
    """The wrapped oracle, asked for clusters: each cluster's items in one request, answered by their mean."""

    def __init__(self, inner: Oracle | Callable, members: Mapping[str, Mapping[str, tuple[str, ...]]]):
        self.inner = as_oracle(inner)
        self.members = members  # benchmark -> cluster -> items

    def _items(self, benchmark: str, clusters: Sequence[str]) -> tuple[list[str], list[int]]:
        items = [self.members[benchmark][c] for c in clusters]
        return [i for group in items for i in group], [len(group) for group in items]

    def _means(self, scores: np.ndarray, sizes: list[int]) -> np.ndarray:
        bounds = np.cumsum([0, *sizes])
        return np.array([scores[bounds[k] : bounds[k + 1]].mean() for k in range(len(sizes))], dtype=float)

    def __call__(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray:
        items, sizes = self._items(benchmark, item_ids)
        return self._means(np.asarray(self.inner(benchmark, config_id, model, items), dtype=float), sizes)

    def evaluate_many(self, requests: Sequence[Request], seconds_left=None, tick=None) -> list[np.ndarray]:
        expanded = [(b, c, m, self._items(b, clusters)) for b, c, m, clusters in requests]
        answers = self.inner.evaluate_many([(b, c, m, items) for b, c, m, (items, _) in expanded], seconds_left, tick)
        out = []
        for (_, _, _, (items, sizes)), scores in zip(expanded, answers, strict=True):
            if len(scores) < len(items):  # an oracle on a budget answered a prefix: the whole clusters in it
                whole = int(np.searchsorted(np.cumsum(sizes), len(scores), side="right"))
                sizes = sizes[:whole]
                scores = scores[: sum(sizes)]
            out.append(self._means(np.asarray(scores, dtype=float), sizes))
        return out

    def cost(self, benchmark: str, config_id: str, model: str) -> float | None:
        per_item = self.inner.cost(benchmark, config_id, model)
        if per_item is None:
            return None
        sizes = [len(v) for v in self.members[benchmark].values()]
        return per_item * float(np.mean(sizes))

    def work_clock(self) -> float | None:
        return self.inner.work_clock()


def items_of(evaluated: Mapping[tuple[str, str, str], np.ndarray], members) -> dict[tuple[str, str, str], np.ndarray]:
    """What certify evaluated, clusters back to their items (for items.parquet of what was used)."""
    return {
        (b, c, m): np.array([i for k in clusters for i in members[b][k]], dtype=object)
        for (b, c, m), clusters in evaluated.items()
    }
