"""The grid's format in one place: its columns, a row, a cell's file stem.

A grid (docs/formats.md) has one row per cell, (model, configuration): `sweep` writes it, `import`
assembles it from lm-eval folders, Inspect logs and EEE records, `analyze` reads it, and a person may
write one by hand. Each of them takes the columns from here, so a column added, renamed or reordered
changes them all at once.
"""

from __future__ import annotations

# The contract columns (DESIGN.md): what `analyze` requires of any grid, in the order sweep and import write them.
GRID_COLUMNS = (
    "model",
    "benchmark",
    "template",
    "decoding",
    "shots",
    "scoring",
    "precision",
    "package",
    "n_items",
    "n_seeds",
    "score",
    "parse_rate",
    "tier",
    "config_id",
)
# Optional columns the analysis reads when present:
#   status    ok (default when absent or blank) | failed | not_applicable; only ok rows are analysed
#   tie_rate  share of logprob items whose top candidates tie exactly (NaN for free-form)
STATUS = "status"
OK = "ok"
STATUSES = (OK, "failed", "not_applicable")
TIE_RATE = "tie_rate"
OPTIONAL_COLUMNS = (STATUS, TIE_RATE)
# What sweep and import write first; their own extra columns follow.
WRITTEN_COLUMNS = (*GRID_COLUMNS, STATUS)


def grid_row(
    model: str,
    config,
    precision: str,
    package: str,
    n_items: int,
    n_seeds: int,
    score: float | None,
    parse_rate: float | None,
    tier: str | None,
    config_id: str,
    status: str | None = OK,
    **extra,
) -> dict:
    """One grid row: `config` carries the axes (benchmark, template, decoding, shots, scoring); `extra`
    columns follow the written ones, in the order given. status None leaves the column to the writer
    (a sweep's cell file keeps its status beside the row)."""
    row = {
        "model": model,
        "benchmark": config.benchmark,
        "template": config.template,
        "decoding": config.decoding,
        "shots": config.shots,
        "scoring": config.scoring,
        "precision": precision,
        "package": package,
        "n_items": n_items,
        "n_seeds": n_seeds,
        "score": score,
        "parse_rate": parse_rate,
        "tier": tier,
        "config_id": config_id,
    }
    if status is not None:
        row[STATUS] = status
    return {**row, **extra}


def written_order(columns) -> list[str]:
    """The written columns first, then the others in their order."""
    columns = list(columns)
    return [*WRITTEN_COLUMNS, *(c for c in columns if c not in WRITTEN_COLUMNS)]


def cell_stem(config_id: str) -> str:
    """A configuration's file and folder name inside a model's folder (cells/, logs/):
    `bbq__T1__greedy__0shot__logprob`."""
    return config_id.replace("/", "__")
