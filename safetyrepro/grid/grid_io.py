"""Reading and validating a grid (the grid format of docs/formats.md) into the one shape every metric reads.

A grid is validated against the rules file before anything is computed: an unknown axis value, a
configuration outside the envelope, a duplicate cell or a score outside [0, 1] is a `UserError`
that names the row, the column and what is allowed. Partial coverage is not an error: each
benchmark is analysed on the configurations that every model has, and the loader says how many
were dropped.

CSV floats are parsed round-trip, then every ok cell's score is mapped to the fraction of its
n_items x n_seeds answers it stands for (safetyrepro/grid/exact.py): rho_flip, the orderings and every other
verdict decide ties with plain `>` / `<` / `==` on those values, so two models with the same count of
correct answers tie however a float sum of seed means rounded.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.grid_schema import GRID_COLUMNS, OK, OPTIONAL_COLUMNS, STATUS, STATUSES, TIE_RATE, check_set
from safetyrepro.limits import MAX_LABEL_CHARS, MAX_SPEC_CHARS, label_problem, shorten
from safetyrepro.tasks.envelope import AXES, Config, Rules

from .exact import exact_scores

MAX_COUNT = 10**9  # items or seeds per cell

# Ties are decided on the written values, so CSV floats must parse exactly: pandas 3 does by
# default (and deprecates the option); pandas 2 needs the round-trip parser.
_EXACT_FLOATS = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}


@dataclass(frozen=True, eq=False)
class Grid:
    """One (precision, package) group of a validated grid, restricted to the configurations that
    every model has, per benchmark. `cells` has one row per (model, config_id)."""

    cells: pd.DataFrame
    models: tuple[str, ...]
    benchmarks: tuple[str, ...]
    configs: dict[str, tuple[str, ...]]  # benchmark -> its common config_ids, in envelope order
    precision: str
    package: str
    source: str
    warnings: tuple[str, ...] = ()
    # rows of the same (precision, package) group whose status is not ok: never analysed, only reported
    excluded: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(GRID_COLUMNS) + [STATUS]))

    @property
    def has_tie_rate(self) -> bool:
        return TIE_RATE in self.cells.columns and bool(self.cells[TIE_RATE].notna().any())

    def config_ids(self, benchmark: str) -> tuple[str, ...]:
        return self.configs[benchmark]

    def matrix(self, benchmark: str, column: str = "score", config_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """Configs x models table of `column` (rows in envelope order, models alphabetical)."""
        rows = self.cells[self.cells["benchmark"] == benchmark]
        wide = rows.pivot(index="config_id", columns="model", values=column)
        order = list(config_ids) if config_ids is not None else list(self.config_ids(benchmark))
        return wide.loc[order, list(self.models)]


def envelope_order(config_ids, rules: Rules) -> tuple[str, ...]:
    """Config ids in the rules file's own axis order (T1..T4, greedy..diverse, 0..5 shots)."""
    rank = {a: {v: i for i, v in enumerate(rules.axes[a])} for a in AXES}

    def key(config_id: str) -> tuple:
        cfg = Config.from_id(config_id)
        return (cfg.benchmark, *(rank[a].get(cfg.axis(a), 99) for a in AXES))

    return tuple(sorted(set(config_ids), key=key))


# -- reading ---------------------------------------------------------------------------------------
ITEM_FILES = ("items.parquet", "items.csv")  # what a sweep or an import writes beside grid.csv
# the envelope a grid was made under when it is not the packaged one (`safetyrepro import` writes it
# when imported configurations leave the packaged envelope; docs/formats.md)
RULES_BESIDE = ("rules.yaml",)


def beside_grid(grid_path: Path, names: Sequence[str]) -> str | None:
    """The first of `names` that is a file in the grid's folder, else None."""
    return next((str(grid_path.parent / n) for n in names if (grid_path.parent / n).is_file()), None)


def read_table(path: str | Path, what: str = "grid") -> pd.DataFrame:
    """CSV or Parquet, chosen by suffix; every failure is one line naming the file."""
    p = Path(path)
    if p.is_dir():
        raise UserError(
            f"{what} file {p} is a directory; give the {what} file itself"
            + (" (e.g. DIR/grid.csv)" if what == "grid" else " (e.g. DIR/items.parquet)")
        )
    if not p.is_file():
        raise UserError(f"{what} file {p} does not exist")
    check_set(p)  # a member of a sweep's output set is read only when the set is whole
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(p)
        return pd.read_csv(p, dtype={"model": str, "item_id": str}, **_EXACT_FLOATS)
    except pd.errors.EmptyDataError:
        raise UserError(f"{what} file {p} is empty") from None
    except (pd.errors.ParserError, ValueError, OSError) as e:
        raise UserError(f"cannot read {what} file {p}: {str(e).splitlines()[0]}") from None


def load_grid(
    path: str | Path, rules: Rules, precision: str | None = None, package: str | None = None, min_models: int = 2
) -> Grid:
    frame = validate_cells(read_table(path), rules, str(path))
    frame = select_group(frame, str(path), precision, package)
    return common_configurations(frame, str(path), rules, min_models=min_models)


# -- validation ------------------------------------------------------------------------------------
def plain(value):
    """numpy scalars print as np.int64(4); a user wrote 4."""
    return value.item() if isinstance(value, np.generic) else value


def _row(frame: pd.DataFrame, mask: pd.Series) -> int:
    """1-based data row (header not counted) of the first offending row."""
    return int(np.flatnonzero(mask.to_numpy())[0]) + 1


def _numeric(frame: pd.DataFrame, column: str, source: str) -> pd.Series:
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() & frame[column].notna()
    if bad.any():
        i = _row(frame, bad)
        raise UserError(
            f"grid {source} row {i}: column {column!r} has non-numeric value {plain(frame[column].iloc[i - 1])!r}"
        )
    return values.astype(float)


def _check_unit_interval(frame: pd.DataFrame, values: pd.Series, column: str, source: str) -> None:
    missing = values.isna()
    if missing.any():
        i = _row(frame, missing)
        r = frame.iloc[i - 1]
        raise UserError(
            f"grid {source} row {i}: {column} is missing (NaN) for model {r['model']!r}, "
            f"config {r['config_id']!r}; every cell needs a {column} in [0, 1]"
        )
    outside = (values < 0) | (values > 1)
    if outside.any():
        i = _row(frame, outside)
        r = frame.iloc[i - 1]
        raise UserError(
            f"grid {source} row {i}: {column} {float(values.iloc[i - 1])!r} for model {r['model']!r}, "
            f"config {r['config_id']!r} is outside [0, 1]"
        )


def _check_configurations(out: pd.DataFrame, rules: Rules, source: str) -> None:
    """Every row's configuration is inside the envelope, named by its config_id and tagged with the rules' tier."""
    for i, r in enumerate(out[["benchmark", *AXES, "config_id", "tier"]].itertuples(index=False), start=1):
        cfg = Config(r.benchmark, r.template, r.decoding, int(r.shots), r.scoring)
        broken = rules.violated(cfg)
        if broken:
            raise UserError(
                f"grid {source} row {i}: configuration {cfg.config_id} is outside the envelope ({'; '.join(broken)})"
            )
        if r.config_id != cfg.config_id:
            raise UserError(
                f"grid {source} row {i}: config_id {r.config_id!r} does not match the row's axes "
                f"(expected {cfg.config_id!r})"
            )
        if r.tier != rules.tier(cfg):
            raise UserError(
                f"grid {source} row {i}: tier {r.tier!r} for {cfg.config_id} disagrees with the rules "
                f"file, which tags it {rules.tier(cfg)!r} (was the grid written under other rules?)"
            )


def validate_cells(frame: pd.DataFrame, rules: Rules, source: str) -> pd.DataFrame:
    """Check a raw grid table against the contract and the rules; return it with typed columns."""
    missing = [c for c in GRID_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"grid {source} lacks column(s) {', '.join(missing)}; a grid needs: {', '.join(GRID_COLUMNS)}")
    if frame.empty:
        raise UserError(f"grid {source} has no rows")
    optional = [c for c in OPTIONAL_COLUMNS if c in frame.columns]
    out = frame.loc[:, [*GRID_COLUMNS, *optional]].reset_index(drop=True).copy()
    status = out[STATUS] if STATUS in out.columns else pd.Series(OK, index=out.index)
    status = status.astype(object).where(status.notna(), OK).astype(str).str.strip().replace("", OK)
    unknown = ~status.isin(STATUSES)
    if unknown.any():
        i = _row(out, unknown)
        raise UserError(
            f"grid {source} row {i}: column 'status' has unknown value {status.iloc[i - 1]!r}; "
            f"allowed: {', '.join(STATUSES)}"
        )
    out[STATUS] = status
    ok = status == OK
    for column in (
        "model",
        "benchmark",
        "template",
        "decoding",
        "scoring",
        "precision",
        "package",
        "tier",
        "config_id",
    ):
        blank = out[column].isna() | (out[column].astype(str).str.strip() == "")
        if blank.any():
            raise UserError(f"grid {source} row {_row(out, blank)}: column {column!r} is empty")
        out[column] = out[column].astype(str).str.strip()

    for label in out["model"].unique():  # a label names figures and report rows: bounded before any work
        # a spec used as its own label (lm-eval:...:model_args) may be long; beyond MAX_SPEC_CHARS it is damage
        problem = (
            f"model label {shorten(label)} is longer than {MAX_SPEC_CHARS} characters (the cap MAX_SPEC_CHARS)"
            if len(label) > MAX_SPEC_CHARS
            else label_problem(label[:MAX_LABEL_CHARS])
        )
        if problem:
            raise UserError(f"grid {source}: {problem}")
    shots = _numeric(out, "shots", source)
    not_int = shots.isna() | (shots != shots.round())
    if not_int.any():
        i = _row(out, not_int)
        raise UserError(
            f"grid {source} row {i}: column 'shots' has unknown value {plain(frame['shots'].iloc[i - 1])!r}; "
            f"allowed: {', '.join(map(str, rules.axes['shots']))}"
        )
    out["shots"] = shots.astype(int)

    allowed = {"benchmark": rules.benchmarks, **{a: rules.axes[a] for a in AXES}}
    for column, values in allowed.items():
        unknown = ~out[column].isin(list(values))
        if unknown.any():
            i = _row(out, unknown)
            raise UserError(
                f"grid {source} row {i}: column {column!r} has unknown value {plain(out[column].iloc[i - 1])!r}; "
                f"allowed: {', '.join(map(str, values))}"
            )

    _check_configurations(out, rules, source)

    # A cell that did not run (failed, not_applicable) may leave its numbers empty; an ok cell may not.
    for column in ("score", "parse_rate"):
        out[column] = _numeric(out, column, source)
        _check_unit_interval(out, out[column].where(ok, 0.0), column, source)
    for column in ("n_items", "n_seeds"):
        counts = _numeric(out, column, source)
        # an item count beyond any real subset (or int64) is a damaged value, not a big one
        bad = ok & (counts.isna() | (counts < 1) | (counts != counts.round()) | (counts > MAX_COUNT))
        if bad.any():
            i = _row(out, bad)
            raise UserError(
                f"grid {source} row {i}: column {column!r} must be a whole number from 1 to {MAX_COUNT:,}, "
                f"got {plain(frame[column].iloc[i - 1])!r}"
            )
        out[column] = counts.fillna(0).astype(int)
    # the one comparison rule (exact.py): equal fractions of a cell's answers are equal floats
    out["score"] = np.where(ok, exact_scores(out["score"], out["n_items"], out["n_seeds"]), out["score"])
    if TIE_RATE in out.columns:
        out[TIE_RATE] = _numeric(out, TIE_RATE, source)
        outside = out[TIE_RATE].notna() & ((out[TIE_RATE] < 0) | (out[TIE_RATE] > 1))
        if outside.any():
            i = _row(out, outside)
            raise UserError(
                f"grid {source} row {i}: tie_rate {float(out[TIE_RATE].iloc[i - 1])!r} is outside [0, 1] "
                f"(leave it empty for free-form cells)"
            )

    key = ["model", "config_id", "precision", "package"]
    dup = out.duplicated(key, keep=False)
    if dup.any():
        rows = np.flatnonzero(dup.to_numpy())
        first = out.iloc[rows[0]]
        same = [int(j) + 1 for j in rows if (out.iloc[j][key] == first[key]).all()]
        raise UserError(
            f"grid {source} has duplicate cells: rows {' and '.join(map(str, same[:2]))} are both "
            f"model {first['model']!r}, config {first['config_id']!r}, precision {first['precision']!r}, "
            f"package {first['package']!r}"
        )
    return out


def select_group(
    frame: pd.DataFrame, source: str, precision: str | None = None, package: str | None = None
) -> pd.DataFrame:
    """Keep one (precision, package) group. Mixed input is refused rather than pooled: a flip that
    comes from changing precision is a different question, answered by `safetyrepro compare`."""
    keep = pd.Series(True, index=frame.index)
    if precision is not None:
        keep &= frame["precision"] == precision
    if package is not None:
        keep &= frame["package"] == package
    groups = frame.groupby(["precision", "package"]).size()
    listing = ", ".join(f"{p}/{k} ({n} rows)" for (p, k), n in groups.items())
    chosen = frame[keep]
    if chosen.empty:
        raise UserError(
            f"grid {source} has no rows for precision {precision or 'any'!r}, package "
            f"{package or 'any'!r}; it holds: {listing}"
        )
    if chosen.groupby(["precision", "package"]).ngroups > 1:
        raise UserError(
            f"grid {source} mixes (precision, package) groups: {listing}; analyse one with "
            f"--precision/--package, or set them side by side with `safetyrepro compare`"
        )
    return chosen.reset_index(drop=True)


def common_configurations(
    frame: pd.DataFrame, source: str, rules: Rules, min_models: int = 2, min_configs: int = 2
) -> Grid:
    """Restrict every benchmark to the configurations that all models have; say what was dropped.
    `analyze` needs two models and two configurations per benchmark; `compare` pairs single cells."""
    status = frame[STATUS] if STATUS in frame.columns else pd.Series(OK, index=frame.index)
    excluded = frame[status != OK].reset_index(drop=True)
    frame = frame[status == OK].reset_index(drop=True)
    warnings: list[str] = []
    if len(excluded):
        warnings.append(excluded_sentence(excluded))
    if frame.empty:
        raise UserError(f"grid {source} has no cell with status ok; {excluded_sentence(excluded)}")
    models = tuple(sorted(frame["model"].unique()))
    if len(models) < min_models:
        raise UserError(
            f"grid {source} has a single model ({models[0]!r}); rho_flip and orderings compare "
            f"models, so a grid needs at least two"
        )
    keep_parts = []
    for benchmark in sorted(frame["benchmark"].unique()):
        rows = frame[frame["benchmark"] == benchmark]
        per_config = rows.groupby("config_id")["model"].nunique()
        common = per_config[per_config == len(models)].index
        dropped = len(per_config) - len(common)
        if dropped:
            lacking = rows.groupby("model")["config_id"].nunique().reindex(list(models), fill_value=0)
            short = ", ".join(f"{m} has {n}" for m, n in lacking.items() if n < len(per_config))
            warnings.append(
                f"{benchmark}: {dropped} of {len(per_config)} configurations dropped because not every "
                f"model has them ({short}); analysed on the {len(common)} common configurations"
            )
        if len(common) < min_configs:
            held = "a single configuration" if len(common) == 1 else "no configuration"
            warnings.append(f"{benchmark}: left out, it has {held} common to all models; rho_flip needs at least two")
            continue
        keep_parts.append(rows[rows["config_id"].isin(common)])
    if not keep_parts:
        n = frame["config_id"].nunique()
        what = (
            f"one configuration ({frame['config_id'].iloc[0]})"
            if n == 1
            else "no benchmark with two configurations common to all models"
        )
        raise UserError(
            f"grid {source} has {what}; rho_flip and orderings need at least two configurations per benchmark"
        )
    cells = pd.concat(keep_parts, ignore_index=True)
    present = set(cells["benchmark"])
    benchmarks = tuple(b for b in rules.benchmarks if b in present)
    configs = {b: envelope_order(cells.loc[cells["benchmark"] == b, "config_id"], rules) for b in benchmarks}
    return Grid(
        cells=cells,
        models=models,
        benchmarks=benchmarks,
        configs=configs,
        precision=str(cells["precision"].iloc[0]),
        package=str(cells["package"].iloc[0]),
        source=source,
        warnings=tuple(warnings),
        excluded=excluded,
    )


def excluded_cells(excluded: pd.DataFrame) -> pd.DataFrame:
    """Cells left out because their status is not ok, counted per status, model, benchmark and scoring."""
    columns = ["status", "model", "benchmark", "scoring", "n_cells"]
    if excluded.empty:
        return pd.DataFrame(columns=columns)
    counts = excluded.groupby(["status", "model", "benchmark", "scoring"]).size().rename("n_cells").reset_index()
    return counts[columns]


def excluded_sentence(excluded: pd.DataFrame) -> str:
    """One line: how many cells were left out and why."""
    parts = []
    for status, g in excluded.groupby(STATUS, sort=True):
        where = "; ".join(f"{r.model} {r.benchmark} {r.scoring} ({r.n_cells})" for r in excluded_cells(g).itertuples())
        parts.append(f"{len(g)} {status} ({where})")
    return (
        f"{len(excluded)} cells left out of every table because their status is not ok: "
        + ", ".join(parts)
        + "; they are never scored as 0"
    )


def model_pairs(models: tuple[str, ...]) -> list[tuple[str, str]]:
    """Unordered pairs with model_a < model_b alphabetically (the contract's orientation)."""
    return list(itertools.combinations(sorted(models), 2))
