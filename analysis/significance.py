"""Significant flips (beyond the paper): which strict wins survive a paired bootstrap over items.

With per-item records, each configuration's A - B difference gets a paired percentile bootstrap
over items: items are drawn with replacement and every model's answer to a drawn item comes
along. A strict win for A counts as significant when the two-sided (1 - alpha) interval of the
mean difference lies above zero (below zero for B). rho_flip_sig = min(significant A wins,
significant B wins) / |C| then counts only reversals that the items support in both directions.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.tasks.envelope import Config, Rules

from .grid_io import Grid, plain, read_table
from .rank_flip import model_pairs
from .slices import slice_config_ids

ITEM_COLUMNS = ("model", "config_id", "item_id", "seed", "item_score")
TEST_NAME = "paired percentile bootstrap over items"
SCORE_TOLERANCE = 1e-6  # items averaged back to a cell should reproduce the grid's score


@dataclass(frozen=True)
class ItemRecords:
    """Per (model, config_id) item means over seeds: a frame indexed by item_id, one column per model."""

    by_config: dict[str, pd.DataFrame]
    warnings: tuple[str, ...]
    source: str


def load_items(path: str, grid: Grid) -> ItemRecords:
    frame = read_table(path, what="items")
    missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"items file {path} lacks column(s) {', '.join(missing)}; item records need: "
                        f"{', '.join(ITEM_COLUMNS)}")
    for column, value in (("precision", grid.precision), ("package", grid.package)):
        if column in frame.columns:  # optional: keep the grid's own group when the records say
            frame = frame[frame[column].astype(str) == value]
    return item_records(frame, grid, path)


def item_records(frame: pd.DataFrame, grid: Grid, source: str) -> ItemRecords:
    scores = pd.to_numeric(frame["item_score"], errors="coerce")
    bad = scores.isna() | (scores < 0) | (scores > 1)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"items file {source} row {i + 1}: item_score {plain(frame['item_score'].iloc[i])!r} is not a "
                        f"number in [0, 1]")
    frame = frame.assign(item_score=scores.astype(float), model=frame["model"].astype(str),
                         config_id=frame["config_id"].astype(str), item_id=frame["item_id"].astype(str))
    for cid in frame["config_id"].unique():
        Config.from_id(cid)  # a malformed id is a one-line error
    known = set(grid.cells["config_id"])
    frame = frame[frame["config_id"].isin(known) & frame["model"].isin(grid.models)]
    # Seeds first, then items: an item's score is its mean over the seeds it was run with.
    per_item = frame.groupby(["config_id", "model", "item_id"])["item_score"].mean()
    by_config, warnings, mismatched, partial = {}, [], [], 0
    grid_scores = grid.cells.set_index(["config_id", "model"])["score"]
    cell_means = frame.groupby(["config_id", "model", "seed"])["item_score"].mean().groupby(level=[0, 1]).mean()
    for (cid, model), value in cell_means.items():
        if abs(value - grid_scores[(cid, model)]) > SCORE_TOLERANCE:
            mismatched.append(f"{model} on {cid}")
    for cid, block in per_item.groupby(level="config_id"):
        wide = block.droplevel("config_id").unstack("model")
        if wide.shape[1] < len(grid.models):
            continue
        complete = wide.dropna()
        partial += len(wide) - len(complete)
        by_config[cid] = complete[list(grid.models)]
    if partial:
        warnings.append(f"items: {partial} (config, item) records lack some model and were left out of the "
                        f"paired bootstrap")
    if mismatched:
        warnings.append(f"items: {len(mismatched)} cells' item means differ from the grid score by more than "
                        f"{SCORE_TOLERANCE:g} (first: {mismatched[0]}); the tests use the items, the counts the grid")
    if not by_config:
        warnings.append(f"items: {source} holds no records for this grid's models and configurations")
    return ItemRecords(by_config, tuple(warnings), source)


def paired_item_tests(items: ItemRecords, grid: Grid, n_resamples: int, alpha: float, seed: int) -> pd.DataFrame:
    """One row per configuration x pair: the grid's difference, the bootstrap interval, the verdict."""
    rows = []
    grid_scores = grid.cells.set_index(["config_id", "model"])["score"]
    for cid in sorted(items.by_config):
        x = items.by_config[cid].to_numpy(dtype=float)  # items x models
        n = len(x)
        if n == 0:
            continue
        rng = np.random.default_rng([seed, zlib.crc32(cid.encode())])
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
        means = weights @ x / n  # resamples x models
        col = {m: i for i, m in enumerate(items.by_config[cid].columns)}
        for a, b in model_pairs(grid.models):
            diff = means[:, col[a]] - means[:, col[b]]
            lo, hi = np.percentile(diff, [100 * alpha / 2, 100 * (1 - alpha / 2)])
            grid_diff = grid_scores[(cid, a)] - grid_scores[(cid, b)]
            if grid_diff > 0 and lo > 0:
                verdict = a
            elif grid_diff < 0 and hi < 0:
                verdict = b
            else:
                verdict = "tie" if grid_diff == 0 else "n.s."
            rows.append({"benchmark": Config.from_id(cid).benchmark, "config_id": cid, "model_a": a, "model_b": b,
                         "n_items": n, "diff_grid": grid_diff, "diff_items": float(x[:, col[a]].mean() - x[:, col[b]].mean()),
                         "ci_low": float(lo), "ci_high": float(hi), "significant_winner": verdict})
    return pd.DataFrame(rows, columns=["benchmark", "config_id", "model_a", "model_b", "n_items", "diff_grid",
                                       "diff_items", "ci_low", "ci_high", "significant_winner"])


def significant_flips(tests: pd.DataFrame, grid: Grid, rules: Rules, slices: Sequence[str],
                      n_resamples: int, alpha: float) -> pd.DataFrame:
    """Per benchmark x slice x pair: plain and significance-filtered rho_flip on the configurations
    that have item records (the plain one is recomputed there so the two sit on the same |C|)."""
    rows = []
    for benchmark in grid.benchmarks:
        for name in slices:
            ids = set(slice_config_ids(grid, rules, benchmark, name))
            for (a, b), g in tests[tests["config_id"].isin(ids)].groupby(["model_a", "model_b"]):
                n = len(g)
                plus, minus = int((g["diff_grid"] > 0).sum()), int((g["diff_grid"] < 0).sum())
                plus_sig = int((g["significant_winner"] == a).sum())
                minus_sig = int((g["significant_winner"] == b).sum())
                rows.append({"benchmark": benchmark, "slice": name, "model_a": a, "model_b": b,
                             "n_configs": n, "n_configs_slice": len(ids), "n_plus": plus, "n_minus": minus,
                             "rho_flip": min(plus, minus) / n, "n_plus_sig": plus_sig, "n_minus_sig": minus_sig,
                             "rho_flip_sig": min(plus_sig, minus_sig) / n, "test": TEST_NAME,
                             "alpha": alpha, "n_resamples": n_resamples})
    return pd.DataFrame(rows)
