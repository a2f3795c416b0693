"""Hand-built grids for the analysis tests (imported by name; conftest.py only holds fixtures): scores are
written out per model and configuration, the other contract columns are filled in from the config id and
the rules file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from safetyrepro.grid.grid_io import common_configurations, validate_cells
from safetyrepro.grid_schema import grid_row
from safetyrepro.tasks.envelope import Config, default_rules

# truthfulqa's conservative core, in envelope order
CC = (
    "truthfulqa/T1/greedy/0shot/free_form",
    "truthfulqa/T1/greedy/0shot/logprob",
    "truthfulqa/T3/greedy/0shot/free_form",
    "truthfulqa/T3/greedy/0shot/logprob",
)


def grid_frame(
    scores: dict[str, dict[str, float]],
    parse_rate: dict[tuple[str, str], float] | None = None,
    precision: str = "nf4",
    package: str = "lm-eval",
) -> pd.DataFrame:
    """scores: model -> config_id -> score. parse_rate: (model, config_id) -> rate, default 1.0."""
    rules = default_rules()
    rows = []
    for model, per_config in scores.items():
        for cid, score in per_config.items():
            cfg = Config.from_id(cid)
            rows.append(
                grid_row(
                    model,
                    cfg,
                    precision,
                    package,
                    100,
                    len(rules.seeds(cfg.decoding)),
                    score,
                    (parse_rate or {}).get((model, cid), 1.0),
                    rules.tier(cfg),
                    cid,
                    status=None,
                )
            )
    return pd.DataFrame(rows)


def to_grid(frame: pd.DataFrame):
    rules = default_rules()
    return common_configurations(validate_cells(frame, rules, "test"), "test", rules)


def write(frame: pd.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path
