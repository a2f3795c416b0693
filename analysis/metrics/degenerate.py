"""Degenerate cells: cells whose score says more about parsing or answering habits than about the items.

A cell is degenerate for any of these named reasons (`reasons`, the codes; `reason`, in words):

- `parse_rate`: its parse rate is below the parse-clean threshold (0.95): an unparsed answer counts
  as wrong, so the score measures the parser and the template as much as the model.
- `empty` (with `raw_output` in the item records): more than 5 % of its free-form outputs are empty.
- `constant_answer` (with `prediction` and `gold`): one label on at least 95 % of its parsed answers
  (item x seed records, at least 5 of them), whatever the gold labels' spread: a cell that answers
  "A" to everything, or "not toxic" to everything, says nothing about its items.
- `no_better_than_majority` (with `prediction` and `gold`): its parsed answers agree with gold no
  more often than always answering the most frequent gold label among them would (at least 5): the
  answers carry no information about the items beyond the label frequencies.

Benchmarks whose better direction is not "higher" (CrowS-Pairs) are screened for parse rate and
empty outputs only: their labels are the two sentences of a pair, not answer positions, and their
gold is always the stereotypical sentence, so one label on every pair is the measurement itself.

Such a cell usually scores near 0 or near the majority share, so it can set a model's lowest score
(and with it SDI and the CFR pass share) and put the model last in that configuration (moving
orderings and pair verdicts). The headline numbers read every configuration (slice `full`);
`degenerate_effects.csv` reads each metric with them (`full`) and on the configurations that hold
no degenerate cell (the `parse_clean` columns: the parse-clean slice less any configuration holding
a cell flagged for any reason), so both readings stand side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from safetyrepro.analysis.metrics.dispersion import compliance_flip, dispersion
from safetyrepro.analysis.metrics.orderings import orderings_reached
from safetyrepro.analysis.metrics.rank_flip import pair_columns, sign_counts
from safetyrepro.analysis.metrics.readings import read_flags
from safetyrepro.analysis.metrics.slices import PARSE_CLEAN, PARSE_CLEAN_MIN, slice_config_ids
from safetyrepro.analysis.paired.significance import _empty_outputs, _option_bias
from safetyrepro.grid.direction import direction, has_pass_fail
from safetyrepro.grid.grid_io import Grid
from safetyrepro.tasks.envelope import Rules

EMPTY_SHARE_MAX = 1 - PARSE_CLEAN_MIN  # more empty outputs than this makes a cell degenerate
CONSTANT_ANSWER_MIN = 0.95  # one label on at least this share of a cell's parsed answers ...
MIN_PARSED_ANSWERS = 5  # ... (and the majority comparison) once a cell has this many parsed answers
REASON_CODES = ("parse_rate", "empty", "constant_answer", "no_better_than_majority")

CELL_COLUMNS = (
    "model",
    "benchmark",
    "config_id",
    "score",
    "parse_rate",
    "n_empty",
    "n_outputs",
    "n_parsed",
    "top_share",
    "agreement",
    "majority_share",
    "reasons",
    "reason",
    "lowest_of_model",
    "last_in_config",
)
EFFECT_COLUMNS = ("benchmark", "model", "metric", "full", "parse_clean", "n_configs_full", "n_configs_parse_clean")
_ANSWER_COLUMNS = {
    "n_predictions": np.nan,
    "top_label": np.nan,
    "top_share": np.nan,
    "agreement": np.nan,
    "majority_share": np.nan,
    "gold_top_share": np.nan,
}


def _flags(cells: pd.DataFrame) -> pd.DataFrame:
    """One boolean column per reason code."""
    screened = cells["benchmark"].map(lambda b: direction(b).monotone) & (cells["n_predictions"] >= MIN_PARSED_ANSWERS)
    return (
        pd.DataFrame(
            {
                "parse_rate": cells["parse_rate"] < PARSE_CLEAN_MIN,
                "empty": (cells["n_empty"] / cells["n_outputs"]) > EMPTY_SHARE_MAX,
                "constant_answer": screened & (cells["top_share"] >= CONSTANT_ANSWER_MIN),
                # a constant answer equal to the majority label is both; the words name each
                "no_better_than_majority": screened & (cells["agreement"] <= cells["majority_share"]),
            },
            index=cells.index,
        )
        .fillna(False)
        .astype(bool)
    )


def _words(r, flags) -> str:
    reasons = []
    if flags["parse_rate"]:
        reasons.append(f"parse_rate {r.parse_rate:.2f} < {PARSE_CLEAN_MIN}")
    if pd.notna(r.n_empty) and r.n_empty > 0:
        reasons.append(
            "every output empty"
            if r.n_empty == r.n_outputs
            else f"{int(r.n_empty)} of {int(r.n_outputs)} outputs empty"
        )
    if flags["constant_answer"]:
        reasons.append(
            f"constant answer: label {int(r.top_label)} on {r.top_share:.0%} of {int(r.n_predictions)} parsed answers"
        )
    if flags["no_better_than_majority"]:
        reasons.append(
            f"no better than the majority label: agrees with gold on {r.agreement:.0%} of "
            f"{int(r.n_predictions)} parsed answers, always answering the most frequent gold label "
            f"would on {r.majority_share:.0%}"
        )
    return "; ".join(reasons)


def _screened(r, flags) -> dict:
    """A flagged cell's SCREEN_COLUMNS: what the screen read and why it flagged the cell."""
    return {
        "model": r.model,
        "benchmark": r.benchmark,
        "config_id": r.config_id,
        "parse_rate": float(r.parse_rate),
        "n_empty": r.n_empty,
        "n_outputs": r.n_outputs,
        "n_parsed": r.n_predictions,
        "top_share": r.top_share,
        "agreement": r.agreement,
        "majority_share": r.majority_share,
        "reasons": ";".join(c for c in REASON_CODES if flags[c]),
        "reason": _words(r, flags),
    }


def degenerate_cells(
    grid: Grid, empty_outputs: pd.DataFrame | None = None, option_bias: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per degenerate cell, with its reason codes and words, and which per-model and
    per-config readings it sits at the bottom of. `option_bias` is what the parsed answers carry
    (significance._option_bias)."""
    cells = grid.cells
    if empty_outputs is not None and not empty_outputs.empty:
        cells = cells.merge(empty_outputs, on=["model", "config_id"], how="left")
    else:
        cells = cells.assign(n_empty=np.nan, n_outputs=np.nan)
    if option_bias is not None and not option_bias.empty:
        cells = cells.merge(option_bias, on=["model", "config_id"], how="left")
    else:
        cells = cells.assign(**_ANSWER_COLUMNS)
    flags = _flags(cells)
    flagged = cells[flags.any(axis=1)]
    rows = []
    matrices: dict[str, pd.DataFrame] = {}  # one pivot per benchmark, not one per flagged cell
    lowest: dict[str, pd.Series] = {}
    for r in flagged.itertuples():
        f = flags.loc[r.Index]
        if r.benchmark not in matrices:
            matrices[r.benchmark] = grid.matrix(r.benchmark)
            lowest[r.benchmark] = matrices[r.benchmark].min()
        m = matrices[r.benchmark]
        better = direction(r.benchmark).better_value(m.loc[r.config_id])
        rows.append(
            {
                **_screened(r, f),
                "score": float(r.score),
                "lowest_of_model": bool(r.score <= lowest[r.benchmark][r.model]),
                "last_in_config": bool(better[r.model] < better.drop(r.model).min()),
            }
        )
    out = pd.DataFrame(rows, columns=list(CELL_COLUMNS))
    for column in ("n_empty", "n_outputs", "n_parsed"):  # counts print as integers, blank where unknown
        out[column] = out[column].astype("Int64")
    return out


def _reading(grid: Grid, benchmark: str, ids: Sequence[str], thetas: Sequence[float]) -> dict:
    """Per-model and per-benchmark metrics on one set of configurations."""
    if not ids:
        return {}
    m = grid.matrix(benchmark, config_ids=ids)
    x = m.to_numpy(dtype=float)
    out = {}
    for k, model in enumerate(m.columns):
        d = dispersion(x[:, k])
        out[(model, "score_min")] = d.low
        out[(model, "sdi")] = d.sdi
        if has_pass_fail(benchmark):
            for theta in thetas:
                out[(model, f"cfr@{theta}")] = compliance_flip(x[:, k], theta).cfr
    plus, minus, _ = sign_counts(x, *pair_columns(m.columns))
    out[("all", "rho_flip_max")] = float(np.minimum(plus, minus).max() / len(x))
    out[("all", "n_orderings")] = orderings_reached(m).n_orderings
    if not direction(benchmark).monotone:
        out[("all", "n_orderings_better")] = orderings_reached(direction(benchmark).better_value(m)).n_orderings
    return out


def degenerate_effects(grid: Grid, rules: Rules, cells: pd.DataFrame, thetas: Sequence[float]) -> pd.DataFrame:
    """For each benchmark with degenerate cells: each affected model's lowest score, SDI and CFR,
    and the benchmark's rho_flip max and orderings, on `full` and on `parse_clean`."""
    rows = []
    for benchmark in grid.benchmarks:
        mine = cells[cells["benchmark"] == benchmark]
        if mine.empty:
            continue
        full_ids = grid.config_ids(benchmark)
        held = set(mine["config_id"])  # without every configuration that holds a degenerate cell
        clean_ids = tuple(c for c in slice_config_ids(grid, rules, benchmark, PARSE_CLEAN) if c not in held)
        with_them, without = _reading(grid, benchmark, full_ids, thetas), _reading(grid, benchmark, clean_ids, thetas)
        affected = set(mine["model"])
        for (model, metric), value in with_them.items():
            if model != "all" and model not in affected:
                continue
            rows.append(
                (
                    benchmark,
                    model,
                    metric,
                    float(value),
                    float(without.get((model, metric), np.nan)),
                    len(full_ids),
                    len(clean_ids),
                )
            )
    return pd.DataFrame(rows, columns=list(EFFECT_COLUMNS))


# the cell's own columns, without those that read the grid (its score, its place among the models)
SCREEN_COLUMNS = tuple(c for c in CELL_COLUMNS if c not in ("score", "lowest_of_model", "last_in_config"))


def screen_records(frame: pd.DataFrame, parse_rates: Mapping[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """The same screen as degenerate_cells (`_flags`, `_words`, the same thresholds) on item records alone, no
    Grid: one row per degenerate (model, config_id) of `frame` (items.parquet's format), SCREEN_COLUMNS. A cell's
    parse rate is the share of its item x seed records that were read (readings.read_flags), so it is the rate on
    exactly the items the records hold (certify: the items a claim used); where the records cannot tell a read
    reply, `parse_rates` ((model, config_id) -> rate, e.g. the grid's) stands in, else the rate is unknown (NaN:
    never flagged for it). Empty outputs need `raw_output`, answers `prediction` and `gold`, as for the grid."""
    if frame.empty:
        return pd.DataFrame([], columns=list(SCREEN_COLUMNS))
    frame = frame.assign(model=frame["model"].astype(str), config_id=frame["config_id"].astype(str))
    key = ["model", "config_id"]
    read = read_flags(frame)
    if read is not None:
        cells = frame.assign(read=read).groupby(key)["read"].mean().rename("parse_rate").reset_index()
    else:
        cells = frame[key].drop_duplicates().reset_index(drop=True)
        known = parse_rates or {}
        cells["parse_rate"] = [float(known.get((m, c), np.nan)) for m, c in zip(cells["model"], cells["config_id"])]
    cells["benchmark"] = cells["config_id"].str.split("/").str[0]
    empty, bias = _empty_outputs(frame), _option_bias(frame)
    cells = (
        cells.merge(empty, on=key, how="left") if empty is not None else cells.assign(n_empty=np.nan, n_outputs=np.nan)
    )
    cells = cells.merge(bias, on=key, how="left") if bias is not None else cells.assign(**_ANSWER_COLUMNS)
    flags = _flags(cells)
    rows = [_screened(r, flags.loc[r.Index]) for r in cells[flags.any(axis=1)].itertuples()]
    return pd.DataFrame(rows, columns=list(SCREEN_COLUMNS))
