"""Synthetic grids and item records for certification, built as a sweep builds them: 0/1 answers per item
and seed, a cell's score the mean of its seeds' shares; imported by name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import default_rules


def synthetic_run(rng: np.random.Generator, accuracy: Callable[[object, str], float], n_items: int = 300,
                  models: tuple[str, ...] = ("a", "b"), benchmark: str = "truthfulqa") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(grid, items) for `models` over the benchmark's full envelope; accuracy(cfg, model) is the model's
    chance of a correct answer in that configuration. Items share a difficulty so the models' answers
    correlate, as real models' do."""
    rules = default_rules()
    difficulty = rng.normal(0, 1, n_items)
    rows, items = [], []
    for cfg in rules.configs(benchmark):
        seeds = rules.seeds(cfg.decoding)
        for model in models:
            p = accuracy(cfg, model)
            logit = np.log(p / (1 - p)) - 0.8 * difficulty
            shares = []
            for s in range(len(seeds)):
                x = (rng.random(n_items) < 1 / (1 + np.exp(-logit))).astype(float)
                shares.append(sum(float(v) for v in x) / n_items)
                items.append(pd.DataFrame({"model": model, "config_id": cfg.config_id,
                                           "item_id": [f"{benchmark}/{i:04d}" for i in range(n_items)], "seed": s,
                                           "item_score": x}))
            rows.append({"model": model, "benchmark": benchmark, "template": cfg.template, "decoding": cfg.decoding,
                         "shots": cfg.shots, "scoring": cfg.scoring, "precision": "fp32", "package": "lm-eval",
                         "n_items": n_items, "n_seeds": len(seeds), "score": sum(shares) / len(shares),
                         "parse_rate": 1.0, "tier": rules.tier(cfg), "config_id": cfg.config_id})
    return pd.DataFrame(rows), pd.concat(items, ignore_index=True)
