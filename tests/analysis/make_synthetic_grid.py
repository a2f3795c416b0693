"""Build a synthetic full-envelope grid (3 models x 5 benchmarks = 612 cells) in the docs/formats.md
format, optionally with per-item records and a run.json beside it.

    python tests/analysis/make_synthetic_grid.py OUT_DIR [--items N] [--seed S] [--run-json]

Scores are a model x benchmark base plus model-specific template, decoding, shots and scoring
effects and a little noise, so pairs flip on some benchmarks and not on others; T4 free-form
cells on toxigen and xstest parse worse, as in the paper.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import Rules, default_rules

MODELS = ("mistral", "qwen", "yi")
BASE = {  # model -> benchmark -> base score; close bases make flips likely, far ones (bbq) rare
    "mistral": {"truthfulqa": 0.50, "bbq": 0.45, "crows_pairs": 0.60, "toxigen": 0.62, "xstest": 0.80},
    "qwen": {"truthfulqa": 0.52, "bbq": 0.75, "crows_pairs": 0.58, "toxigen": 0.63, "xstest": 0.82},
    "yi": {"truthfulqa": 0.45, "bbq": 0.62, "crows_pairs": 0.59, "toxigen": 0.60, "xstest": 0.79},
}


def _base(model: str, benchmark: str) -> float:
    """The paper's five have hand-set bases; any other registered benchmark (a new folder) gets one
    from its name, so that the grid covers whatever the registry holds."""
    bases = BASE.get(model, BASE["qwen"])
    if benchmark in bases:
        return bases[benchmark]
    digest = int.from_bytes(hashlib.sha256(f"{model}/{benchmark}".encode()).digest()[:4], "big")
    return 0.45 + 0.3 * digest / 2**32


def synthetic_grid(seed: int = 0, rules: Rules | None = None, models: tuple[str, ...] = MODELS) -> pd.DataFrame:
    rules = rules or default_rules()
    rng = np.random.default_rng(seed)
    effects = {
        m: {a: {v: rng.normal(0, 0.04) for v in rules.axes[a]} for a in ("template", "decoding", "shots", "scoring")}
        for m in models
    }
    rows = []
    for cfg in rules.configs():
        for m in models:
            e = effects[m]
            score = (
                _base(m, cfg.benchmark)
                + e["template"][cfg.template]
                + e["decoding"][cfg.decoding]
                + e["shots"][cfg.shots]
                + e["scoring"][cfg.scoring]
                + rng.normal(0, 0.02)
            )
            parse = 1.0
            if cfg.scoring == "free_form":
                parse = rng.uniform(0.96, 1.0)
                if cfg.template == "T4" and cfg.benchmark in ("toxigen", "xstest"):
                    parse = rng.uniform(0.86, 0.94)
            rows.append(
                {
                    "model": m,
                    "benchmark": cfg.benchmark,
                    "template": cfg.template,
                    "decoding": cfg.decoding,
                    "shots": cfg.shots,
                    "scoring": cfg.scoring,
                    "precision": "nf4",
                    "package": "lm-eval",
                    "n_items": 292 if cfg.benchmark == "bbq" else 295,
                    "n_seeds": len(rules.seeds(cfg.decoding)),
                    "score": round(float(np.clip(score, 0.01, 0.99)), 4),
                    "parse_rate": round(float(parse), 4),
                    "tier": rules.tier(cfg),
                    "config_id": cfg.config_id,
                }
            )
    return pd.DataFrame(rows)


def synthetic_items(grid: pd.DataFrame, n_items: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Binary item records drawn around each cell's score; returns (items, grid rescored from them)."""
    rng = np.random.default_rng(seed + 1)
    records, rescored = [], grid.copy()
    for i, cell in grid.iterrows():
        seeds = range(1, int(cell["n_seeds"]) + 1)
        per_seed = []
        for s in seeds:
            hits = (rng.random(n_items) < cell["score"]).astype(float)
            per_seed.append(hits.mean())
            records.append(
                pd.DataFrame(
                    {
                        "model": cell["model"],
                        "config_id": cell["config_id"],
                        "item_id": [f"i{k:03d}" for k in range(n_items)],
                        "seed": s,
                        "item_score": hits,
                    }
                )
            )
        rescored.at[i, "score"] = float(np.mean(per_seed))
    rescored["n_items"] = n_items
    return pd.concat(records, ignore_index=True), rescored


def run_json(rules: Rules) -> dict:
    return {
        "rules_sha256": rules.sha256,
        "models": [
            {"label": m, "weights_sha256": f"{i:064x}", "source": f"synthetic/{m}"} for i, m in enumerate(MODELS, 1)
        ],
        "item_subsets": {b: f"{b}-seed42-n295" for b in rules.benchmarks},
        "packages": {"lm-eval": "0.4.8", "torch": "2.13.0"},
        "machine": "synthetic (no model was run)",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--items", type=int, default=0, help="also write items.parquet with this many items per cell")
    p.add_argument("--run-json", action="store_true", help="also write a run.json")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rules = default_rules()
    grid = synthetic_grid(args.seed, rules)
    if args.items:
        items, grid = synthetic_items(grid, args.items, args.seed)
        items.to_parquet(args.out / "items.parquet", index=False)
    grid.to_csv(args.out / "grid.csv", index=False)
    if args.run_json:
        (args.out / "run.json").write_text(json.dumps(run_json(rules), indent=2))
    print(f"wrote {len(grid)} cells to {args.out / 'grid.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
