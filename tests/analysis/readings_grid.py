"""A grid whose free-form leads are format-driven (issue 52's synthetic case), built as a sweep builds one:
a grid row per cell and item records beside it, the cell score the mean of its item scores.

Two models on BBQ's conservative core, 40 items a configuration, one seed (greedy):
- free-form (T1 and T3): `model-a` reads every reply and is right on items 0-9 and 20-31 (22 of 40,
  0.550); `model-b`'s replies are read on items 0-19 only (parse rate 0.500; the others name an option
  without the template's `Answer:` line) and it is right on items 0-15 (16 of 40, 0.400). So A leads on
  the strict score only because B's replies are unread: on the 20 items both read, B is right on 16 and A
  on 10 (B ahead 0.800 vs 0.500; 6 discordant items, all B's: exact McNemar p = 2 / 2**6 = 0.03125).
- logprob (T1 and T3): both read everything; B right on items 0-23 (0.600), A on items 0-19 (0.500).
Gold labels cycle 0, 1, 2 over the items, a wrong reply names the next label, so no cell answers one
label or no better than the gold labels' frequencies: the only degenerate cells are B's two free-form ones.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from safetyrepro.grid_schema import grid_row
from safetyrepro.tasks.envelope import Config, default_rules

N_ITEMS = 40
FREE = ("bbq/T1/greedy/0shot/free_form", "bbq/T3/greedy/0shot/free_form")
LOGPROB = ("bbq/T1/greedy/0shot/logprob", "bbq/T3/greedy/0shot/logprob")
A, B = "model-a", "model-b"
CONTENT_P = 2 / 2**6  # exact McNemar on 6 discordant items, all B's


def _correct(model: str, config_id: str, k: int) -> bool:
    if config_id.endswith("free_form"):
        return (k < 10 or 20 <= k < 32) if model == A else k < 16
    return k < 20 if model == A else k < 24


def _read(model: str, config_id: str, k: int) -> bool:
    return not (model == B and config_id.endswith("free_form") and k >= 20)


def item_records() -> pd.DataFrame:
    rows = []
    for model in (A, B):
        for cid in (*FREE, *LOGPROB):
            for k in range(N_ITEMS):
                gold = k % 3
                read, right = _read(model, cid, k), _correct(model, cid, k)
                rows.append(
                    {
                        "model": model,
                        "config_id": cid,
                        "benchmark": "bbq",
                        "item_id": f"bbq-{k:03d}",
                        "seed": 0,
                        "raw_output": f"Answer: {'ABC'[gold if right else (gold + 1) % 3]}"
                        if read
                        else "The answer is A. Not known.",
                        "prediction": (gold if right else (gold + 1) % 3) if read else None,
                        "parsed": read,
                        "gold": gold,
                        "item_score": float(read and right),
                    }
                )
    return pd.DataFrame(rows)


def grid() -> pd.DataFrame:
    rules = default_rules()
    items = item_records()
    rows = []
    for (model, cid), cell in items.groupby(["model", "config_id"], sort=False):
        cfg = Config.from_id(cid)
        rows.append(
            grid_row(
                model,
                cfg,
                "fp32",
                "lm-eval",
                N_ITEMS,
                1,
                float(cell["item_score"].mean()),
                float(cell["parsed"].mean()),
                rules.tier(cfg),
                cid,
                status=None,
            )
        )
    return pd.DataFrame(rows)


def write_case(folder: Path) -> tuple[Path, Path]:
    """grid.csv and items.parquet in `folder` (made if missing); returns both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    grid_path, items_path = folder / "grid.csv", folder / "items.parquet"
    grid().to_csv(grid_path, index=False)
    item_records().to_parquet(items_path)
    return grid_path, items_path
