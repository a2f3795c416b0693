"""Per-item records checked against the grid cells they are read for, before any of them is used: what
`certify replay`, live certify's resume and `plan GRID` read. A record that is not the grid's, or not
a score the cell could have given, would be averaged in silently and move a verdict.

- Only the grid's own (precision, package) group and cells: records of another group are left out.
- One record per (model, configuration, item, seed): an exact repeat is dropped (and counted), two
  records of one key with different scores are refused.
- Every item of a cell has the cell's n_seeds seeds, and the cell no more seeds than that (seed 7 on a
  greedy cell is refused).
- Every cell's records cover the grid's n_items items (records of 24 items against a grid that says 300
  are refused: a certificate or plan of "the full subset" would be of another subset).
- Every score is one the cell's scoring can give, one seed at a time: free-form 0 or 1; logprob j/k for
  k tied top candidates (k up to the record's candidates, or exact.py's tie cap without them), so a
  seed mean is on the lattice 1/(n_seeds x ties) that safetyrepro/grid/exact.py and certify assume.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.limits import shorten

from .exact import LATTICE_MAX, SCORE_TOLERANCE

# the per-item records' key and score columns (items.parquet), as every reader of them needs them
ITEM_COLUMNS = ("model", "config_id", "item_id", "seed", "item_score")

TIE_CAP = 5  # exact.py's LATTICE_MAX holds ties among up to 5 candidates, twice over
KEY = ["model", "config_id", "item_id", "seed"]


def checked_records(
    frame: pd.DataFrame, cells: pd.DataFrame, source: str, whole_cells: bool = True
) -> tuple[pd.DataFrame, list[str]]:
    """(records of `cells` only, notes): `cells` has one row per grid cell (model, config_id, precision,
    package, n_items, n_seeds, scoring). Refuses (UserError, one line naming `source`) records that break
    a rule of the module docstring; notes say what was left out or dropped. `whole_cells`: False for
    records that may hold part of a cell (a live run's, whose items and seeds it picks itself): then only
    the repeats and the scores are checked."""
    notes = []
    for column in ("precision", "package"):
        if column in frame.columns and column in cells.columns and len(cells):
            group = set(cells[column].astype(str))
            other = ~frame[column].astype(str).isin(group)
            if other.any():
                notes.append(
                    f"items: {int(other.sum()):,} records of another {column} than the grid's "
                    f"{', '.join(sorted(group))} were left out"
                )
                frame = frame[~other]
    frame = frame.assign(
        model=frame["model"].astype(str), config_id=frame["config_id"].astype(str), item_id=frame["item_id"].astype(str)
    )
    scores = pd.to_numeric(frame["item_score"], errors="coerce")
    seeds = pd.to_numeric(frame["seed"], errors="coerce")
    bad = scores.isna() | (scores < 0) | (scores > 1) | seeds.isna() | (seeds != seeds.round())
    if bad.any():
        i = int(frame.index[np.flatnonzero(bad.to_numpy())[0]])
        raise UserError(
            f"items file {source} row {i + 1}: item_score must be a number in [0, 1] and seed a whole number"
        )
    frame = frame.assign(item_score=scores.astype(float), seed=seeds.astype("int64"))
    cell = cells.assign(model=cells["model"].astype(str), config_id=cells["config_id"].astype(str))
    cell = cell.set_index(["model", "config_id"])
    frame = frame[pd.MultiIndex.from_arrays([frame["model"], frame["config_id"]]).isin(cell.index)]
    frame = _one_per_key(frame, source, notes)
    if whole_cells:
        _check_seeds_and_items(frame, cell, source)
    _check_lattice(frame, cell, source)
    return frame.reset_index(drop=True), notes


def _one_per_key(frame: pd.DataFrame, source: str, notes: list[str]) -> pd.DataFrame:
    repeated = frame.duplicated(KEY, keep=False)
    if not repeated.any():
        return frame
    spread = frame[repeated].groupby(KEY)["item_score"].agg(["min", "max"])
    conflict = spread[spread["max"] - spread["min"] > SCORE_TOLERANCE]
    if len(conflict):
        (model, cid, item, seed), r = next(iter(conflict.iterrows()))
        raise UserError(
            f"items file {source}: {len(conflict):,} (model, configuration, item, seed) keys have records that "
            f"disagree (e.g. {shorten(model)} on {cid}, item {shorten(item)}, seed {seed}: item_score "
            f"{r['min']:g} and {r['max']:g}); keep one record per key"
        )
    kept = frame.drop_duplicates(KEY)
    notes.append(f"items: {len(frame) - len(kept):,} exact repeats of a record were dropped (each counted once)")
    return kept


def _check_seeds_and_items(frame: pd.DataFrame, cell: pd.DataFrame, source: str) -> None:
    if frame.empty:
        return
    per_cell = frame.groupby(["model", "config_id"]).agg(n_seeds=("seed", "nunique"), n_items=("item_id", "nunique"))
    seeds = cell["n_seeds"].reindex(per_cell.index).astype(int)
    extra = per_cell.index[(per_cell["n_seeds"] > seeds).to_numpy()]
    if len(extra):
        model, cid = extra[0]
        held = sorted(frame.loc[(frame["model"] == model) & (frame["config_id"] == cid), "seed"].unique())
        raise UserError(
            f"items file {source}: {len(extra)} cells have records of seeds the grid never ran (e.g. {shorten(model)} "
            f"on {cid}: seeds {', '.join(map(str, held[:6]))}, the grid ran {seeds[(model, cid)]} seed"
            f"{'s' if seeds[(model, cid)] != 1 else ''})"
        )
    per_item = frame.groupby(["model", "config_id", "item_id"]).size()
    want = seeds.reindex(per_item.index.droplevel(2)).to_numpy()
    short = per_item.index[per_item.to_numpy() != want]
    if len(short):
        model, cid, item = short[0]
        raise UserError(
            f"items file {source}: {len(short):,} items have fewer seed records than their cell's n_seeds (e.g. "
            f"{shorten(model)} on {cid}, item {shorten(item)}: {per_item[short[0]]} of {seeds[(model, cid)]}); "
            "a seed mean needs every seed"
        )
    items = cell["n_items"].reindex(per_cell.index).astype(int)
    wrong = per_cell.index[(per_cell["n_items"] != items).to_numpy()]
    if len(wrong):
        model, cid = wrong[0]
        raise UserError(
            f"items file {source}: {len(wrong)} cells' records cover another number of items than the grid's "
            f"n_items (e.g. {shorten(model)} on {cid}: {per_cell.loc[(model, cid), 'n_items']:,} items, the grid "
            f"says {items[(model, cid)]:,}); give the records and the grid of one run"
        )


def _check_lattice(frame: pd.DataFrame, cell: pd.DataFrame, source: str) -> None:
    """Each seed's score is one its cell's scoring gives (module docstring)."""
    if frame.empty:
        return
    scoring = cell["scoring"].reindex(pd.MultiIndex.from_arrays([frame["model"], frame["config_id"]])).to_numpy()
    x = frame["item_score"].to_numpy(dtype=float)
    on = np.abs(x - np.rint(x)) <= SCORE_TOLERANCE  # 0 or 1: every scoring gives these
    logprob = (scoring == "logprob") & ~on
    if logprob.any():
        caps = np.full(len(frame), TIE_CAP)
        if "logliks" in frame.columns:
            caps = np.array([_candidates(v) for v in frame["logliks"]])
        for k in np.flatnonzero(logprob):
            on[k] = bool(_tie_credit(x[k], int(caps[k])))
    if not on.all():
        i = int(np.flatnonzero(~on)[0])
        r = frame.iloc[i]
        allowed = "0 or 1 (a free-form answer)" if scoring[i] != "logprob" else "j/k for k tied candidates"
        raise UserError(
            f"items file {source} row {int(frame.index[i]) + 1}: item_score {float(x[i])!r} of "
            f"{shorten(r['model'])} on {r['config_id']} is off "
            f"the lattice its scoring gives ({allowed}); those records were edited or not this run's"
        )


def _candidates(logliks) -> int:
    try:
        return max(1, min(len(logliks), LATTICE_MAX))
    except TypeError:
        return TIE_CAP


def _tie_credit(x: float, cap: int) -> bool:
    return any(abs(x * k - round(x * k)) <= SCORE_TOLERANCE * k for k in range(2, cap + 1))
