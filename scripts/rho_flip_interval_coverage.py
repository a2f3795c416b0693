"""How often the item-bootstrap range of rho_flip covers the true rho_flip, on synthetic grids with
item effects and real flips (docs/analysis.md quotes the result). Not a test: it prints rates.

    python scripts/rho_flip_interval_coverage.py [--grids 200] [--items 30] [--resamples 1000]

Each grid: 48 TruthfulQA configurations, two models. An item's chance of a right answer is
sigmoid(level of the configuration + the model's effect on the item + the model's lead in the
configuration): item effects are drawn once per grid and shared by every configuration (an item a
model knows, it knows under every template); the leads are +delta on some configurations and
-delta on others (real flips). The true rho_flip is the grid's rho_flip on the expected scores over
the item population (100,000 items drawn from the same law, no sampling noise); the observed one
uses `--items` items with 0/1 draws (five-seed means for sampled decodings). Reported: the share of
grids whose 2.5-97.5 % range holds the true value, the share holding the observed one, and the
mean bias of the observed rho_flip against the true one (min-of-counts is biased near ties).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grids", type=int, default=200)
    ap.add_argument("--items", type=int, default=30)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--delta", type=float, default=0.4, help="size of a configuration's true lead (logit)")
    args = ap.parse_args()

    from safetyrepro.analysis.paired.significance import item_records, rho_flip_item_bootstrap
    from safetyrepro.grid.grid_io import common_configurations, validate_cells
    from safetyrepro.tasks.envelope import load_rules

    rules = load_rules()
    configs = rules.configs("truthfulqa")
    rows = [
        {
            "model": m,
            "benchmark": c.benchmark,
            "template": c.template,
            "decoding": c.decoding,
            "shots": c.shots,
            "scoring": c.scoring,
            "precision": "bf16",
            "package": "lm-eval",
            "n_items": args.items,
            "n_seeds": 1,
            "score": 0.5,
            "parse_rate": 1.0,
            "tier": rules.tier(c),
            "config_id": c.config_id,
        }
        for m in ("a", "b")
        for c in configs
    ]
    template = validate_cells(pd.DataFrame(rows), rules, "coverage")
    rng = np.random.default_rng(2026)
    covers_true = covers_obs = 0
    bias, widths = [], []
    for g in range(args.grids):
        level = rng.uniform(-1.0, 1.5, len(configs))
        lead = rng.choice([-args.delta, args.delta], len(configs)) * rng.uniform(0.2, 1.0, len(configs))
        sd = 1.5
        # the true rho_flip: expected scores over the item population (100,000 items)
        pop = rng.normal(0, sd, (2, 100_000))
        true_diff = np.array(
            [
                (1 / (1 + np.exp(-(lv + pop[0] + ld))) - 1 / (1 + np.exp(-(lv + pop[1])))).mean()
                for lv, ld in zip(level, lead, strict=True)
            ]
        )
        true_rho = min((true_diff > 0).sum(), (true_diff < 0).sum()) / len(configs)
        eff = rng.normal(0, sd, (2, args.items))
        recs = []
        for k, cfg in enumerate(configs):
            p = 1 / (1 + np.exp(-(level[k] + eff + np.array([[lead[k]], [0.0]]))))
            seeds = 1 if cfg.decoding == "greedy" else 5
            s = (rng.random((seeds, 2, args.items)) < p).mean(axis=0)
            recs += [
                {
                    "model": m,
                    "config_id": cfg.config_id,
                    "item_id": f"q{i:02d}",
                    "seed": 0,
                    "item_score": float(s[j, i]),
                }
                for j, m in enumerate("ab")
                for i in range(args.items)
            ]
        items = pd.DataFrame(recs)
        means = items.groupby(["model", "config_id"])["item_score"].mean().to_dict()
        frame = template.assign(
            score=[means[key] for key in zip(template["model"], template["config_id"], strict=True)]
        )
        grid = common_configurations(frame, "coverage", rules)
        r = item_records(items, grid, "coverage")
        obs_diff = np.array([r.by_config[c.config_id].mean(axis=0) @ [1, -1] for c in configs])
        obs_rho = min((obs_diff > 0).sum(), (obs_diff < 0).sum()) / len(configs)
        iv = rho_flip_item_bootstrap(r, grid, rules, ("full",), args.resamples, seed=g).iloc[0]
        covers_true += bool(iv["rho_flip_lo"] <= true_rho <= iv["rho_flip_hi"])
        covers_obs += bool(iv["rho_flip_lo"] <= obs_rho <= iv["rho_flip_hi"])
        bias.append(obs_rho - true_rho)
        widths.append(iv["rho_flip_hi"] - iv["rho_flip_lo"])
    n = args.grids
    print(f"{n} grids, {args.items} items, {args.resamples} resamples, true leads up to {args.delta} logit:")
    print(
        f"  range holds the true rho_flip in {covers_true}/{n} ({covers_true / n:.1%}), "
        f"the observed one in {covers_obs}/{n} ({covers_obs / n:.1%}); mean width {np.mean(widths):.3f}"
    )
    print(f"  observed - true rho_flip: mean {np.mean(bias):+.3f}, median {np.median(bias):+.3f}")


if __name__ == "__main__":
    main()
