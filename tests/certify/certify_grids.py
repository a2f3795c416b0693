"""Synthetic grids and item records for certification, built as a sweep builds them: 0/1 answers per item
and seed, a cell's score the mean of its seeds' shares; imported by name."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from safetyrepro.tasks.envelope import default_rules


def synthetic_run(
    rng: np.random.Generator,
    accuracy: Callable[[object, str], float],
    n_items: int = 300,
    models: tuple[str, ...] = ("a", "b"),
    benchmark: str = "truthfulqa",
) -> tuple[pd.DataFrame, pd.DataFrame]:
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
                items.append(
                    pd.DataFrame(
                        {
                            "model": model,
                            "config_id": cfg.config_id,
                            "item_id": [f"{benchmark}/{i:04d}" for i in range(n_items)],
                            "seed": s,
                            "item_score": x,
                        }
                    )
                )
            rows.append(
                {
                    "model": model,
                    "benchmark": benchmark,
                    "template": cfg.template,
                    "decoding": cfg.decoding,
                    "shots": cfg.shots,
                    "scoring": cfg.scoring,
                    "precision": "fp32",
                    "package": "lm-eval",
                    "n_items": n_items,
                    "n_seeds": len(seeds),
                    "score": sum(shares) / len(shares),
                    "parse_rate": 1.0,
                    "tier": rules.tier(cfg),
                    "config_id": cfg.config_id,
                }
            )
    return pd.DataFrame(rows), pd.concat(items, ignore_index=True)


def synthetic_problem(
    rng: np.random.Generator,
    accuracy: Callable[[object, str], float],
    n_items: int = 300,
    models: tuple[str, str] = ("a", "b"),
    benchmark: str = "truthfulqa",
):
    """The same draw as `synthetic_run` straight into certification's inputs, without files: (problem,
    oracle, full-subset differences per configuration), for calibration over hundreds of grids."""
    from safetyrepro.certify.algorithm import BenchmarkProblem

    rules = default_rules()
    difficulty = rng.normal(0, 1, n_items)
    ids = tuple(f"{benchmark}/{i:04d}" for i in range(n_items))
    scores, full, configs = {}, {}, []
    for cfg in rules.configs(benchmark):
        n_seeds = len(rules.seeds(cfg.decoding))
        for model in models:
            p = accuracy(cfg, model)
            logit = np.log(p / (1 - p)) - 0.8 * difficulty
            x = (rng.random((n_seeds, n_items)) < 1 / (1 + np.exp(-logit))).sum(axis=0) / n_seeds
            scores[(cfg.config_id, model)] = dict(zip(ids, x, strict=True))
        a, b = (np.array(list(scores[(cfg.config_id, m)].values())) for m in models)
        full[cfg.config_id] = round(float((a - b).mean()), 12)
        configs.append(cfg.config_id)

    def oracle(bench, config_id, model, item_ids):
        mine = scores[(config_id, model)]
        return np.array([mine[i] for i in item_ids])

    return BenchmarkProblem(benchmark, tuple(configs), tuple(models), ids, 5), oracle, full


def correlated_problem(
    rng: np.random.Generator,
    accuracy: Callable[[object, str], float],
    copy: Callable[[object], float],
    n_items: int = 300,
    models: tuple[str, str] = ("a", "b"),
    benchmark: str = "truthfulqa",
):
    """As synthetic_problem, with each free-form answer tied to the same item's log-probability answer of the
    same model, template and shots: every seed's free-form answer is that answer with probability copy(cfg),
    else a fresh draw (the answer read from the text is often the likeliest candidate). The paired differences
    of a free-form configuration and its log-probability twin then correlate (about copy for greedy decoding;
    `twin_correlation` measures it). Returns (problem, oracle, full-subset differences)."""
    from safetyrepro.certify.algorithm import BenchmarkProblem
    from safetyrepro.certify.control import cheap_twin

    rules = default_rules()
    difficulty = rng.normal(0, 1, n_items)
    ids = tuple(f"{benchmark}/{i:04d}" for i in range(n_items))
    configs = [cfg for cfg in rules.configs(benchmark)]
    config_ids = [cfg.config_id for cfg in configs]
    answers: dict[tuple[str, str], np.ndarray] = {}

    def draw(cfg, model, n_seeds):
        p = accuracy(cfg, model)
        logit = np.log(p / (1 - p)) - 0.8 * difficulty
        return rng.random((n_seeds, n_items)) < 1 / (1 + np.exp(-logit))

    for cfg in configs:  # the log-probability twins first: the free-form answers copy them
        if cfg.scoring == "logprob":
            for model in models:
                answers[(cfg.config_id, model)] = draw(cfg, model, 1)
    scores, full = {}, {}
    for cfg in configs:
        n_seeds = len(rules.seeds(cfg.decoding))
        for model in models:
            if cfg.scoring == "logprob":
                x = answers[(cfg.config_id, model)]
            else:
                twin = cheap_twin(cfg.config_id, config_ids)
                fresh = draw(cfg, model, n_seeds)
                tied = rng.random((n_seeds, n_items)) < copy(cfg)
                x = np.where(tied, answers[(twin, model)], fresh) if twin else fresh
            scores[(cfg.config_id, model)] = dict(zip(ids, x.sum(axis=0) / n_seeds, strict=True))
        a, b = (np.array(list(scores[(cfg.config_id, m)].values())) for m in models)
        full[cfg.config_id] = round(float((a - b).mean()), 12)

    def oracle(bench, config_id, model, item_ids):
        mine = scores[(config_id, model)]
        return np.array([mine[i] for i in item_ids])

    return BenchmarkProblem(benchmark, tuple(config_ids), tuple(models), ids, 5), oracle, full


def twin_correlation(problem, oracle) -> dict[str, float]:
    """Per free-form configuration, the correlation of its paired differences with its twin's on the items."""
    from safetyrepro.certify.control import pairings

    a, b = problem.models[:2]
    ids = list(problem.item_ids)
    out = {}
    for cid, twin in pairings(problem.benchmark, problem.config_ids).items():
        d = oracle(problem.benchmark, cid, a, ids) - oracle(problem.benchmark, cid, b, ids)
        c = oracle(problem.benchmark, twin, a, ids) - oracle(problem.benchmark, twin, b, ids)
        out[cid] = float(np.corrcoef(d, c)[0, 1])
    return out
