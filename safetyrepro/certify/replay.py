"""A finished run's per-item records as certification's oracle (`certify replay ITEMS --grid GRID`):
the same algorithm, no model, so anyone can measure on their own data what certification would have
cost and whether it agrees with the full grid."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.readings import read_flags
from safetyrepro.errors import UserError
from safetyrepro.grid.cell_timing import seconds_per_item
from safetyrepro.grid.exact import lattice_of
from safetyrepro.grid.grid_io import Grid, read_table
from safetyrepro.grid.item_validation import ITEM_COLUMNS, checked_records
from safetyrepro.grid.twins import pairings
from safetyrepro.sequential.evidence import both_read
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS

from .algorithm import BenchmarkProblem, closeness


@dataclass(frozen=True)
class Replay:
    problems: tuple[BenchmarkProblem, ...]
    scores: dict[tuple[str, str, str], dict[str, float]]  # (benchmark, config, model) -> item id -> seed-mean score
    records: pd.DataFrame  # the records, for items.parquet of what was used
    full_delta: dict[tuple[str, str, str, str], float]  # (benchmark, config, a, b) -> the full subset's difference
    warnings: tuple[str, ...]

    def oracle(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray:
        mine = self.scores[(benchmark, config_id, model)]
        return np.array([mine[i] for i in item_ids], dtype=float)


def load_replay(items_path: str | Path, grid: Grid, reading: str = "strict") -> Replay:
    """The records as an oracle. `reading` "content": a free-form item's score is its mean over the seeds whose
    reply was read, NaN where none was (evidence.READINGS), so a pair's difference counts only items both
    models' replies were read on."""
    frame = read_table(items_path, what="items")
    missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(
            f"items file {items_path} lacks column(s) {', '.join(missing)}; replay needs: {', '.join(ITEM_COLUMNS)}"
        )
    # the grid's group and cells only; repeats, stray seeds, short cells and off-lattice scores refused
    frame, notes = checked_records(frame, grid.cells, str(items_path))
    if frame.empty:
        raise UserError(f"items file {items_path} holds no records for the grid's models and configurations")
    means = frame.groupby(["config_id", "model", "item_id"])["item_score"].mean()
    if reading == "content":
        means = _read_means(frame, items_path)
    problems, scores, full, warnings = [], {}, {}, list(notes)
    for benchmark in grid.benchmarks:
        configs = grid.config_ids(benchmark)
        sets = {}
        for cid in configs:
            for model in grid.models:
                try:
                    s = means.loc[(cid, model)]
                except KeyError:
                    raise UserError(
                        f"items file {items_path} has no records for {model} on {cid}; replay needs every "
                        f"model on every configuration of the grid"
                    ) from None
                scores[(benchmark, cid, model)] = s
                sets[(cid, model)] = frozenset(s.index)
        common = frozenset.intersection(*sets.values())
        if len(set(sets.values())) > 1:
            warnings.append(
                f"{benchmark}: the configurations' records hold different items; replay uses the "
                f"{len(common)} items every model has on every configuration"
            )
        if not common:
            raise UserError(
                f"items file {items_path}: no item of {benchmark} is scored by every model on every configuration"
            )
        item_ids = tuple(sorted(common))
        lattice = lattice_of(
            np.concatenate(
                [scores[(benchmark, c, m)].loc[list(item_ids)].to_numpy() for c in configs for m in grid.models]
            )
        )
        # a benchmark SafetyRepro does not define (the grid's rules list it as external) is higher-is-better
        ideal: Literal["declared"] | None = "declared" if benchmark in BENCHMARKS else None
        pool = _twin_pool(benchmark, configs, grid.models, sets, common, ideal)
        if pool:
            warnings.append(
                f"{benchmark}: the cheap twins hold {len(pool)} items beyond those: with --control auto they are "
                "the partner items (the population target)"
            )
        problems.append(
            BenchmarkProblem(benchmark, tuple(configs), tuple(grid.models), item_ids, lattice, ideal=ideal, pool=pool)
        )
        for cid in configs:
            for i, a in enumerate(grid.models):
                for b in grid.models[i + 1 :]:
                    d = np.subtract(
                        *both_read(
                            scores[(benchmark, cid, a)].loc[list(item_ids)].to_numpy(dtype=float),
                            scores[(benchmark, cid, b)].loc[list(item_ids)].to_numpy(dtype=float),
                        )
                    )
                    full[(benchmark, cid, a, b)] = round(float(d.mean()), 12)
    return Replay(tuple(problems), {k: v.to_dict() for k, v in scores.items()}, frame, full, tuple(warnings))


def _twin_pool(benchmark, configs, models, sets, common, ideal) -> tuple[str, ...]:
    """The items every model has on every cheap twin of the benchmark's configurations beyond the `common` ones:
    a twin swept on more of the benchmark than its costly configurations (issue 56: it is cheap) gives the
    control its partners there, and the costly configurations keep their whole subset."""
    twins = set(pairings(closeness(benchmark) if ideal == "declared" else ideal, configs).values())
    if not twins:
        return ()
    held = frozenset.intersection(*(sets[(cid, m)] for cid in twins for m in models))
    return tuple(sorted(held - common))


def replay_clusters(replay: Replay, field: str, items_path) -> dict[str, dict[str, str]]:
    """benchmark -> item id -> its cluster, from the records' column `field` (`--cluster FIELD`): every item of
    the problems needs one, the same in every record of it."""
    frame = replay.records
    if field not in frame.columns:
        raise UserError(f"--cluster {field}: items file {items_path} has no column {field!r}")
    out: dict[str, dict[str, str]] = {}
    for problem in replay.problems:
        rows = frame[frame["config_id"].isin(problem.config_ids) & frame["item_id"].isin(problem.item_ids)]
        if rows[field].isna().any():
            item = rows.loc[rows[field].isna(), "item_id"].iloc[0]
            raise UserError(f"--cluster {field}: item {item} of {problem.benchmark} has none")
        labels = rows.groupby("item_id")[field].agg(lambda v: sorted({str(x) for x in v}))
        split = labels[labels.map(len) > 1]
        if len(split):
            raise UserError(
                f"--cluster {field}: item {split.index[0]} of {problem.benchmark} is in clusters "
                f"{', '.join(split.iloc[0][:3])} in different records: a cluster is one per item"
            )
        out[problem.benchmark] = {str(i): v[0] for i, v in labels.items()}
    return out


def _read_means(frame: pd.DataFrame, items_path) -> pd.Series:
    """Per (config, model, item), the mean item score over the seeds whose reply was read; NaN where none was
    (log-probability records are always read)."""
    read = read_flags(frame)
    if read is None:
        raise UserError(
            f"--reading content needs to know which replies were read: items file {items_path} has no parsed "
            "or prediction column"
        )
    return frame["item_score"].where(read).groupby([frame["config_id"], frame["model"], frame["item_id"]]).mean()


def contradicted(claim: str, full_delta: float, delta: float) -> bool:
    """Whether the full subset's difference contradicts a claim."""
    return {"a_better": full_delta <= 0, "b_better": full_delta >= 0, "within_delta": abs(full_delta) >= delta}.get(
        claim, False
    )


def used_records(replay: Replay, evaluated: dict[tuple[str, str, str], np.ndarray]) -> pd.DataFrame:
    """The records of every (model, configuration, item) certification evaluated, in items.parquet's format."""
    keys = pd.DataFrame(
        [(cid, model, item) for (_, cid, model), items in evaluated.items() for item in items],
        columns=["config_id", "model", "item_id"],
    )
    out = replay.records.merge(keys, on=["config_id", "model", "item_id"], how="inner")
    return out.sort_values(["model", "config_id", "item_id", "seed"], kind="stable").reset_index(drop=True)


def benchmark_seconds(grid_path: Path, grid: Grid) -> dict[str, float]:
    """benchmark -> measured seconds per model evaluation of one item (mean over the grid's timed cells),
    from the sweep's cell files beside the grid; empty without them."""
    cells = set(zip(grid.cells["model"], grid.cells["config_id"], strict=True))
    timing = seconds_per_item(Path(grid_path).parent, cells)
    out = {}
    for benchmark, (per_item_sum, _, n_cells) in timing.items():
        out[benchmark] = per_item_sum / n_cells
    return out
