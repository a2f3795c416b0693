"""Per-item records and how a cell's numbers follow from them (one place for every package)."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from safetyrepro.tasks.benchmark import Benchmark
from safetyrepro.tasks.subsets import ItemSet


@dataclass(frozen=True)
class ItemRecord:
    item_id: str
    seed: int
    prompt_sha256: str
    raw_output: str | None  # generated text (free-form) or the winning candidate (logprob)
    prediction: int | None  # index into the benchmark's labels; None = unparsed
    parsed: bool
    gold: int
    item_score: float  # the item's contribution: the cell score is the mean over items and seeds
    logliks: list[float] | None = None
    tied: bool = False  # logprob: the highest log-likelihood is shared by several candidates

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CellSummary:
    score: float
    parse_rate: float
    seed_scores: dict[int, float]
    seed_parse_rates: dict[int, float]
    extra: dict[str, float]
    n_items: int
    tie_rate: float | None  # logprob cells: share of item records with tied winners; None for free-form


def summarize(records: Sequence[ItemRecord], bench: Benchmark, items: ItemSet) -> CellSummary:
    """Score = mean over seeds of the per-seed mean item score; extras averaged over seeds likewise."""
    by_seed: dict[int, list[ItemRecord]] = defaultdict(list)
    for r in records:
        by_seed[r.seed].append(r)
    seed_scores = {s: sum(r.item_score for r in rs) / len(rs) for s, rs in sorted(by_seed.items())}
    seed_parse = {s: sum(r.parsed for r in rs) / len(rs) for s, rs in sorted(by_seed.items())}
    extras: dict[str, list[float]] = defaultdict(list)
    for rs in by_seed.values():
        for k, v in bench.compute_extra_metrics(
            [items.by_id(r.item_id) for r in rs], [r.prediction for r in rs], [r.item_score for r in rs]
        ).items():
            extras[k].append(v)
    n_items = len({r.item_id for r in records})
    return CellSummary(
        score=sum(seed_scores.values()) / len(seed_scores),
        parse_rate=sum(seed_parse.values()) / len(seed_parse),
        seed_scores=seed_scores,
        seed_parse_rates=seed_parse,
        extra={k: (sum(v) / len(v) if not any(math.isnan(x) for x in v) else float("nan")) for k, v in extras.items()},
        n_items=n_items,
        tie_rate=(
            sum(r.tied for r in records) / len(records)
            if records and all(r.logliks is not None for r in records)
            else None
        ),
    )
