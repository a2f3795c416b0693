"""Paired comparisons across grids: the same cells measured twice or more under something that
should not matter (precision BF16 vs NF4, a stratified item subsample, another seed).

Each input grid is split into its (precision, package) groups, so one grid holding both
precisions compares as well as two grids. Cells are paired on (model, benchmark, config_id);
cells missing from any group are dropped with a warning.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.chance import chance_rho_flip
from safetyrepro.analysis.metrics.orderings import induced_ordering, ordering_label
from safetyrepro.analysis.metrics.rank_flip import pair_counts
from safetyrepro.errors import UserError
from safetyrepro.grid.grid_io import (
    Grid,
    common_configurations,
    envelope_order,
    model_pairs,
    read_table,
    validate_cells,
)
from safetyrepro.tasks.envelope import Rules

PAIR_KEY = ["model", "benchmark", "config_id"]
TOP_N = 5
FLOAT_SLACK = 1e-9


@dataclass(frozen=True)
class LabelledGrid:
    label: str
    grid: Grid


@dataclass(frozen=True)
class Comparison:
    labels: tuple[str, ...]
    cells: pd.DataFrame  # one row per paired cell: scores per group, delta, spread
    summary: pd.DataFrame  # one row: |delta| / spread statistics
    by_model: pd.DataFrame  # spread statistics per model
    top_cells: pd.DataFrame  # the TOP_N largest spreads
    orderings: pd.DataFrame  # per (benchmark, config): ordering per group, invariant, pair flips
    ordering_summary: pd.DataFrame  # per (benchmark, template, scoring): configs, invariant ones
    ranges: pd.DataFrame  # per (model, benchmark): within-envelope range in each group
    rho_flip: pd.DataFrame  # per group x benchmark x pair on the paired configurations
    warnings: tuple[str, ...]


def load_groups(paths: Sequence[str | Path], rules: Rules, labels: Sequence[str] | None = None) -> list[LabelledGrid]:
    parts: list[tuple[Path, str, str, pd.DataFrame]] = []
    for path in map(Path, paths):
        frame = validate_cells(read_table(path), rules, str(path))
        for (precision, package), g in frame.groupby(["precision", "package"], sort=True):
            parts.append((path, precision, package, g.reset_index(drop=True)))
    if len(parts) < 2:
        raise UserError(
            "compare needs at least two grids, or one grid holding two (precision, package) groups; "
            f"got {len(parts)} group"
        )
    names = list(labels) if labels else _auto_labels([(p, pr, pk) for p, pr, pk, _ in parts])
    if len(names) != len(parts):
        raise UserError(
            f"--labels gives {len(names)} labels for {len(parts)} grid groups "
            f"({', '.join(_auto_labels([(p, pr, pk) for p, pr, pk, _ in parts]))})"
        )
    if len(set(names)) != len(names):
        raise UserError(f"labels must be distinct, got {', '.join(names)}")
    return [
        LabelledGrid(name, common_configurations(g, f"{p} ({pr}/{pk})", rules, min_models=1, min_configs=1))
        for name, (p, pr, pk, g) in zip(names, parts, strict=True)
    ]


def _auto_labels(parts: list[tuple[Path, str, str]]) -> list[str]:
    """Name each group by the fewest of precision, package and file that tell the groups apart (the
    file by its folder when every file has the same name, as grid.csv from the sweeper does)."""
    stems = {p.stem for p, _, _ in parts}
    fields = [(pr, pk, p.stem if len(stems) > 1 else (p.parent.name or p.stem)) for p, pr, pk in parts]
    for chosen in ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)):
        names = ["/".join(f[i] for i in chosen) for f in fields]
        if len(set(names)) == len(names):
            return names
    return [f"{'/'.join(f)}#{i + 1}" for i, f in enumerate(fields)]


def compare_grids(groups: list[LabelledGrid], rules: Rules) -> Comparison:
    labels = tuple(g.label for g in groups)
    warnings = [f"{g.label}: {w}" for g in groups for w in g.grid.warnings]
    score_cols = [f"score_{label}" for label in labels]
    parts = [
        g.grid.cells[[*PAIR_KEY, "template", "decoding", "shots", "scoring", "score"]].rename(columns={"score": col})
        for g, col in zip(groups, score_cols, strict=True)
    ]
    merged = parts[0]
    for part, col in zip(parts[1:], score_cols[1:], strict=True):
        merged = merged.merge(part[[*PAIR_KEY, col]], on=PAIR_KEY, how="outer")
    paired = merged.dropna(subset=score_cols).reset_index(drop=True)
    dropped = len(merged) - len(paired)
    if dropped:
        warnings.append(
            f"{dropped} cells are missing from at least one group and were left out; {len(paired)} paired cells remain"
        )
    if paired.empty:
        raise UserError(
            f"the groups {', '.join(labels)} share no cell (model, benchmark, config_id); nothing to compare"
        )
    scores = paired[score_cols].to_numpy(dtype=float)
    paired["spread"] = scores.max(axis=1) - scores.min(axis=1)
    if len(labels) == 2:
        paired["delta"] = scores[:, 1] - scores[:, 0]  # second group minus first
    cells = paired.sort_values(["benchmark", "model", "config_id"]).reset_index(drop=True)

    summary = pd.DataFrame([{**_spread_stats(cells["spread"]), "n_groups": len(labels), "groups": " | ".join(labels)}])
    by_model = pd.DataFrame([{"model": m, **_spread_stats(g["spread"])} for m, g in cells.groupby("model")])
    top = cells.sort_values("spread", ascending=False, kind="stable").head(TOP_N).reset_index(drop=True)
    orderings, ordering_summary = _ordering_stability(cells, labels, score_cols, rules)
    ranges = (
        cells.groupby(["model", "benchmark"])[score_cols]
        .agg(lambda s: s.max() - s.min())
        .reset_index()
        .rename(columns={c: f"range_{lab}" for c, lab in zip(score_cols, labels, strict=True)})
    )
    rho = _rho_flip_per_group(cells, labels, score_cols)
    if cells["model"].nunique() < 2:
        warnings.append("a single model: orderings and rho_flip need two, only score deltas are compared")
    return Comparison(labels, cells, summary, by_model, top, orderings, ordering_summary, ranges, rho, tuple(warnings))


def _spread_stats(spread: pd.Series) -> dict:
    s = spread.to_numpy(dtype=float)
    # 0.90 - 0.85 is 0.05000000000000004 in binary: a cell exactly 5 pp apart is not "over 5 pp"
    over = {f"n_over_{pp}pp": int((s > pp / 100 + FLOAT_SLACK).sum()) for pp in (5, 10)}
    return {"n_cells": len(s), "median": float(np.median(s)), "mean": float(s.mean()), "max": float(s.max()), **over}


def _ordering_stability(
    cells: pd.DataFrame, labels: tuple[str, ...], score_cols: list[str], rules: Rules
) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = []
    for (benchmark, cid), g in cells.groupby(["benchmark", "config_id"]):
        if len(g) < 2:
            continue
        orders = [induced_ordering(dict(zip(g["model"], g[col], strict=True))) for col in score_cols]
        flips = max(_pair_flips(x, y) for x, y in itertools.combinations(orders, 2))
        rows.append(
            {
                "benchmark": benchmark,
                "config_id": cid,
                "template": g["template"].iloc[0],
                "scoring": g["scoring"].iloc[0],
                **{f"ordering_{lab}": ordering_label(o) for lab, o in zip(labels, orders, strict=True)},
                "invariant": len(set(orders)) == 1,
                "max_pair_flips": flips,
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table, pd.DataFrame()
    order = {cid: i for i, cid in enumerate(envelope_order(table["config_id"], rules))}
    table = table.sort_values("config_id", key=lambda s: s.map(order)).reset_index(drop=True)
    summary = (
        table.groupby(["benchmark", "template", "scoring"], sort=False)
        .agg(n_configs=("config_id", "size"), n_invariant=("invariant", "sum"))
        .reset_index()
    )
    return table, summary


def _pair_flips(x: tuple[tuple[str, ...], ...], y: tuple[tuple[str, ...], ...]) -> int:
    """Model pairs placed strictly in opposite order by two (weak) orders; a pair tied in either is no flip."""
    px = {m: i for i, g in enumerate(x) for m in g}
    py = {m: i for i, g in enumerate(y) for m in g}
    return sum((px[a] - px[b]) * (py[a] - py[b]) < 0 for a, b in itertools.combinations(sorted(px), 2))


def _rho_flip_per_group(cells: pd.DataFrame, labels: tuple[str, ...], score_cols: list[str]) -> pd.DataFrame:
    rows = []
    for benchmark, g in cells.groupby("benchmark", sort=False):
        for label, col in zip(labels, score_cols, strict=True):
            wide = g.pivot(index="config_id", columns="model", values=col)
            for a, b in model_pairs(tuple(wide.columns)):
                c = pair_counts(wide[a].to_numpy(), wide[b].to_numpy())
                rows.append(
                    {
                        "group": label,
                        "benchmark": benchmark,
                        "model_a": a,
                        "model_b": b,
                        "n_plus": c.n_plus,
                        "n_minus": c.n_minus,
                        "n_zero": c.n_zero,
                        "n_configs": c.n_configs,
                        "rho_flip": c.rho_flip,
                        "ceiling": c.ceiling,
                        "chance": chance_rho_flip(c.n_configs),
                    }
                )
    return pd.DataFrame(rows)
