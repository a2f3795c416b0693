"""Which earlier records a live run takes as evaluated: its own folder's (a rerun resumes), and those
`--records` names (a sweep's or another certify run's), each only when it was made the same way (the
sweep's record keys and each shared model's spec; store.identity_changes compares them)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.grid.grid_io import read_table
from safetyrepro.grid.item_validation import ITEM_COLUMNS
from safetyrepro.limits import MAX_CONFIG_BYTES, read_capped, shorten
from safetyrepro.sweep.store import RECORD_KEYS, identity_changes, recorded

from .outputs import whole_set


def made_by(spec) -> dict:
    """How a live run's records are made, as its cost.json keeps it ("live"): what `--records` and a
    rerun compare."""
    return {
        "models": list(spec.models),
        "model_specs": list(spec.model_specs),
        "benchmarks": list(spec.benchmarks),
        "package": spec.package,
        "precision": spec.precision,
        "tier": spec.tier,
        "filters": spec.filters,
        "limit": spec.limit,
        "tie_rule": spec.tie_rule,
        "rules_sha256": spec.rules_sha256,
        "fewshot_draw": spec.fewshot_draw,
    }


def check_resumable(out: Path) -> None:
    """A whole set whose cost.json is damaged is refused: starting afresh would replace its items.parquet,
    records a rerun needs. Checked before anything is planned or loaded."""
    if whole_set(out) and (out / "cost.json").exists() and read_json(out / "cost.json") is None:
        raise UserError(
            f"--out {out}: its cost.json is damaged, so its items.parquet cannot be checked as this command's "
            "records; restore cost.json to resume, or choose another --out (give the folder's items.parquet "
            "to --records once cost.json is back)"
        )


def read_json(path: Path):
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return json.loads(read_capped(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES"))
    except (ValueError, UnicodeDecodeError, OSError, UserError):
        return None


def earlier_source(path: Path, spec) -> tuple[Path, dict]:
    """(items file, how it was made) for `--records PATH`: a sweep's or certify run's folder or its
    items.parquet, made the same way as this run (models and specs, package, precision, tie rule,
    rules); the item limit may differ (a record of an item is the same whatever else was scored)."""
    items = path / "items.parquet" if path.is_dir() else path
    folder = items.parent
    if not items.is_file():
        raise UserError(
            f"--records {path}: no items file there (give a sweep's or certify run's folder, or its items.parquet)"
        )
    sweep_json, cost = read_json(folder / "sweep.json"), read_json(folder / "cost.json")
    made = sweep_json if isinstance(sweep_json, dict) else (cost or {}).get("live") if isinstance(cost, dict) else None
    if not isinstance(made, dict):
        raise UserError(
            f"--records {path}: neither a sweep.json nor a live certify run's cost.json beside {items.name}, "
            "so how its records were made is unknown"
        )
    if not same_command(made, spec):
        raise UserError(
            f"--records {path}: its records were made another way ({same_why(made, spec)}); certify "
            "takes only records of the same models, package, precision, tie rule and rules"
        )
    return items, (cost if isinstance(cost, dict) and made is not sweep_json else {**made, "sweep_folder": str(folder)})


def _specs(made: dict) -> dict[str, str]:
    models, specs = made.get("models") or [], made.get("model_specs") or []
    if not isinstance(models, list) or not isinstance(specs, list) or len(models) != len(specs):
        return {}
    return {str(m): str(s) for m, s in zip(models, specs, strict=True)}


def same_command(previous: dict, spec) -> bool:
    """Earlier records serve this run when they were made the same way: package, precision, tie rule and
    rules, and every model the two runs share under one label from the same spec. Other models, the
    filters and the item limit may differ (cells and items are matched one by one); the weights a
    label loads are checked when it loads (LiveOracle.driver)."""
    return not same_why(previous, spec)


def same_why(previous: dict, spec) -> str:
    now = {k: getattr(spec, k) for k in RECORD_KEYS}
    why = [f"{k} was {shorten(recorded(previous, k))}" for k in identity_changes(previous, now)]
    earlier = _specs(previous)
    if not earlier:
        why.append("its models and specs are not recorded")
    for label, model_spec in zip(spec.models, spec.model_specs, strict=True):
        if label in earlier and earlier[label] != model_spec:
            why.append(f"the spec of {shorten(label)} was {shorten(earlier[label])}")
    if earlier and not set(earlier) & set(spec.models):
        why.append("it shares no model with this run")
    return ", ".join(why)


def earlier_weights(folder: Path, made: dict) -> dict[str, str]:
    """label -> weights_sha256 the earlier records were made with, where recorded (a certify run's
    cost.json, a sweep's grid.csv)."""
    out = {}
    for label, record in ((made.get("models_run") or {}) if isinstance(made.get("models_run"), dict) else {}).items():
        if isinstance(record, dict) and isinstance(record.get("weights_sha256"), str):
            out[str(label)] = record["weights_sha256"]
    grid = folder / "grid.csv"
    if "sweep_folder" in made and grid.is_file() and not grid.is_symlink():
        try:
            frame = pd.read_csv(grid, usecols=["model", "weights_sha256"], dtype=str)
        except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
            return out
        for label, sha in frame.dropna().drop_duplicates("model").itertuples(index=False):
            out[str(label)] = str(sha)
    return out


def read_records(path: Path) -> pd.DataFrame:
    frame = read_table(path, what="items")
    missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"items file {path} lacks column(s) {', '.join(missing)}")
    scores = pd.to_numeric(frame["item_score"], errors="coerce")
    seeds = pd.to_numeric(frame["seed"], errors="coerce")
    bad = scores.isna() | (scores < 0) | (scores > 1) | seeds.isna() | (seeds != seeds.round())
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"items file {path} row {i + 1}: item_score must be a number in [0, 1] and seed a whole number")
    return frame.assign(
        model=frame["model"].astype(str),
        config_id=frame["config_id"].astype(str),
        item_id=frame["item_id"].astype(str),
        item_score=scores,
        seed=seeds.astype("int64"),
    )
