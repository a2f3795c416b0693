"""A small synthetic grid with item records for the EEE tests, built as a sweep builds one: 0/1 answers
per item and seed (free-form cells with a prediction, a gold label, a parsed flag and a raw output;
logprob cells with expected-rule partial credit on ties), a cell's score the mean of its seeds' shares.
Two benchmarks: TruthfulQA (higher is better) and CrowS-Pairs (closer to 0.5), three models, and one
cell that failed. Imported by name."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import default_rules

MODELS = ("alpha", "beta", "org/gamma-1b")  # a Hugging Face style label keeps its id
FAILED = ("beta", "truthfulqa/T3/moderate/3shot/free_form")


def synthetic(
    seed: int = 7, n_items: int = 8, benchmarks=("truthfulqa", "crows_pairs"), models=MODELS, subset: str = "core"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(grid, items) over the configurations of the rules' `subset` (core: quick to analyse)."""
    rules = default_rules()
    rng = np.random.default_rng(seed)
    rows, items = [], []
    for benchmark in benchmarks:
        difficulty = rng.normal(0, 1, n_items)
        for cfg in rules.configs(benchmark, subset):
            seeds = rules.seeds(cfg.decoding) if rules.decodings[cfg.decoding].do_sample else (0,)
            for k, model in enumerate(models):
                if (model, cfg.config_id) == FAILED:
                    rows.append(
                        {
                            "model": model,
                            "benchmark": benchmark,
                            "template": cfg.template,
                            "decoding": cfg.decoding,
                            "shots": cfg.shots,
                            "scoring": cfg.scoring,
                            "precision": "bf16",
                            "package": "lm-eval",
                            "n_items": None,
                            "n_seeds": None,
                            "score": None,
                            "parse_rate": None,
                            "tier": rules.tier(cfg),
                            "config_id": cfg.config_id,
                            "status": "failed",
                        }
                    )
                    continue
                p = (
                    0.45
                    + 0.1 * k
                    + (0.15 if cfg.template == "T2" and k == 0 else 0)
                    - (0.2 if cfg.shots == 5 and k == 2 else 0)
                )
                logit = np.log(p / (1 - p)) - 0.8 * difficulty
                shares, parsed_all = [], []
                for s in seeds:
                    x = (rng.random(n_items) < 1 / (1 + np.exp(-logit))).astype(float)
                    if cfg.scoring == "logprob":
                        x[rng.random(n_items) < 0.15] = 0.5  # an exact tie between two candidates: half credit
                    gold = rng.integers(0, 2, n_items)
                    parsed = rng.random(n_items) > 0.1 if cfg.scoring == "free_form" else np.ones(n_items, bool)
                    x[~parsed] = 0.0
                    prediction = np.where(x == 1.0, gold, 1 - gold)
                    shares.append(sum(float(v) for v in x) / n_items)
                    parsed_all.append(parsed.mean())
                    items.append(
                        pd.DataFrame(
                            {
                                "model": model,
                                "config_id": cfg.config_id,
                                "benchmark": benchmark,
                                "package": "lm-eval",
                                "precision": "bf16",
                                "item_id": [f"{benchmark}/{i:03d}" for i in range(n_items)],
                                "seed": s,
                                "item_score": x,
                                "prediction": pd.array(np.where(parsed, prediction, -1), dtype="Int64"),
                                "parsed": parsed,
                                "gold": pd.array(gold, dtype="Int64"),
                                "raw_output": [
                                    f"({'AB'[int(v)]})" if ok else "" for v, ok in zip(prediction, parsed, strict=True)
                                ],
                                "prompt_sha256": [
                                    hashlib.sha256(f"{cfg.config_id}|{i}".encode()).hexdigest() for i in range(n_items)
                                ],
                            }
                        )
                    )
                    items[-1].loc[~parsed, "prediction"] = pd.NA
                rows.append(
                    {
                        "model": model,
                        "benchmark": benchmark,
                        "template": cfg.template,
                        "decoding": cfg.decoding,
                        "shots": cfg.shots,
                        "scoring": cfg.scoring,
                        "precision": "bf16",
                        "package": "lm-eval",
                        "n_items": n_items,
                        "n_seeds": len(seeds),
                        "score": sum(shares) / len(shares),
                        "parse_rate": float(np.mean(parsed_all)),
                        "tier": rules.tier(cfg),
                        "config_id": cfg.config_id,
                        "status": "ok",
                    }
                )
    return pd.DataFrame(rows), pd.concat(items, ignore_index=True)


def write_grid(folder: Path, **kwargs) -> Path:
    """grid.csv and items.parquet in `folder`; returns the grid's path."""
    folder.mkdir(parents=True, exist_ok=True)
    grid, items = synthetic(**kwargs)
    grid.to_csv(folder / "grid.csv", index=False)
    items.to_parquet(folder / "items.parquet", index=False)
    return folder / "grid.csv"
