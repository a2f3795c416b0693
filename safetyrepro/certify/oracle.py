"""What certification asks of whoever scores items: the `Oracle` protocol, with defaults for every
ability but scoring, so an oracle says by subclassing what it offers and the algorithm never asks
whether it offers it.

- `__call__(benchmark, config_id, model, item_ids)`: each item's score (its mean over the cell's seeds).
- `evaluate_many(requests, seconds_left, tick)`: a round's requests together; the default asks them one
  by one and checks that every item is answered. An oracle that keeps a budget (the live one) may answer
  a prefix of a request's items only, once `seconds_left` of its model work are spent, and calls `tick()`
  between its calls (the checkpoints).
- `cost(benchmark, config_id, model)`: seconds one more item is expected to cost; None (the default):
  unknown, every item alike.
- `held(benchmark, config_id, model, item_ids)`: how many of the leading items it answers at no cost
  (earlier records); the default, none.
- `work_clock()`: the seconds of model work spent so far, the clock of a time budget; None (the
  default): the budget runs on wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

Request = tuple[str, str, str, Sequence[str]]  # (benchmark, config_id, model, item_ids)
Scores = Callable[[str, str, str, Sequence[str]], np.ndarray]  # a bare scoring function, as an oracle


@runtime_checkable
class Oracle(Protocol):
    def __call__(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray: ...

    def evaluate_many(
        self,
        requests: Sequence[Request],
        seconds_left: float | None = None,
        tick: Callable[[], None] | None = None,
    ) -> list[np.ndarray]:
        out = []
        for benchmark, config_id, model, item_ids in requests:
            scores = np.asarray(self(benchmark, config_id, model, item_ids), dtype=float)
            if len(scores) != len(item_ids):
                raise ValueError(
                    f"the oracle answered {len(scores)} scores for {len(item_ids)} items ({model}, {config_id})"
                )
            out.append(scores)
        return out

    def cost(self, benchmark: str, config_id: str, model: str) -> float | None:
        return None

    def held(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> int:
        return 0

    def work_clock(self) -> float | None:
        return None


class ScoresOracle(Oracle):
    """A bare scoring function as an oracle with every default (a replay's records, a test's grid)."""

    def __init__(self, scores: Scores):
        self.scores = scores

    def __call__(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray:
        return self.scores(benchmark, config_id, model, item_ids)


def as_oracle(oracle: Oracle | Scores) -> Oracle:
    return oracle if isinstance(oracle, Oracle) else ScoresOracle(oracle)
