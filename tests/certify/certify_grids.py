"""Synthetic grids and item records for certification, built as a sweep builds them: 0/1 answers per item
and seed, a cell's score the mean of its seeds' shares; imported by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from safetyrepro.certify.oracle import Oracle
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
    models: tuple[str, ...] = ("a", "b"),
    benchmark: str = "truthfulqa",
):
    """The same draw as `synthetic_run` straight into certification's inputs, without files: (problem,
    oracle, full-subset differences per configuration, or per (configuration, model_a, model_b) with more
    than two models), for calibration over hundreds of grids."""
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
        for i, ma in enumerate(models):
            for mb in models[i + 1 :]:
                a, b = (np.array(list(scores[(cfg.config_id, m)].values())) for m in (ma, mb))
                key = cfg.config_id if len(models) == 2 else (cfg.config_id, ma, mb)
                full[key] = round(float((a - b).mean()), 12)
        configs.append(cfg.config_id)

    def oracle(bench, config_id, model, item_ids):
        mine = scores[(config_id, model)]
        return np.array([mine[i] for i in item_ids])

    return BenchmarkProblem(benchmark, tuple(configs), tuple(models), ids, 5), oracle, full


def item_cost(config_id: str) -> float:
    """Model time of one item of one model, in proportion to what this project's CPU measured
    (docs/measured.md): a log-probability item 0.1, a greedy free-form one 1, a sampled one 5 (five seeds)."""
    if config_id.endswith("/logprob"):
        return 0.1
    return 1.0 if "/greedy/" in config_id else 5.0


class CostedOracle(Oracle):
    """An oracle under a cost model: `item_cost`, or `rates` {(model, config_id): seconds per item} where
    given (measured ones). It logs every request and adds up the model time of the items it had to
    evaluate (`spent`). `held` {(config_id, model): item ids} are items earlier records hold (a pilot's):
    free, as a live run's. With `known` (a live run) it tells the allocation what an item costs; without,
    it does not (a replay)."""

    def __init__(self, oracle, held: dict | None = None, known: bool = True, rates: dict | None = None):
        self.oracle, self.log, self.held_items, self.rates = oracle, [], held or {}, rates or {}
        self._spent, self.known = 0.0, known

    def __call__(self, benchmark, config_id, model, item_ids):
        self.log.append((config_id, model, tuple(item_ids)))
        mine = self.held_items.get((config_id, model), ())
        self._spent += self._cost(config_id, model) * sum(i not in mine for i in item_ids)
        return self.oracle(benchmark, config_id, model, item_ids)

    def cost(self, benchmark, config_id, model):
        return self._cost(config_id, model) if self.known else None

    def _cost(self, config_id, model):
        return self.rates.get((model, config_id), item_cost(config_id))

    def spent(self) -> float:
        return self._spent

    def work_clock(self) -> float:
        """The cost model's seconds as the oracle's clock of model work: what a time budget counts."""
        return self.spent()

    def held(self, benchmark, config_id, model, item_ids):
        mine = self.held_items.get((config_id, model), ())
        n = 0
        for i in item_ids:
            if i not in mine:
                break
            n += 1
        return n


def pilot(problem, n: int = 24) -> dict:
    """The first n draws of every configuration and model (a sweep's --limit n records, `--order subset`)."""
    first = frozenset(problem.item_ids[:n])
    return {(c, m): first for c in problem.config_ids for m in problem.models}


def _reverses(cfg, model):
    ahead = cfg.template in ("T1", "T2")
    return (0.75 if model == "a" else 0.4) if ahead else (0.4 if model == "a" else 0.75)


def _one_cheap_reversal(cfg, model):
    minority = cfg.config_id.endswith("/T3/greedy/3shot/logprob")
    return (0.4 if model == "a" else 0.75) if minority else (0.7 if model == "a" else 0.45)


def _reversal_on_free_form(cfg, model):
    minority = cfg.template == "T4" and cfg.decoding == "greedy" and cfg.scoring == "free_form"
    return (0.4 if model == "a" else 0.75) if minority else (0.7 if model == "a" else 0.45)


def _reversal_under_sampled_chain_of_thought(cfg, model):
    minority = cfg.template == "T4" and cfg.decoding != "greedy"
    return (0.4 if model == "a" else 0.75) if minority else (0.7 if model == "a" else 0.45)


def _smaller_reversal(cfg, model):
    ahead = cfg.template in ("T1", "T2")
    return (0.65 if model == "a" else 0.42) if ahead else (0.42 if model == "a" else 0.65)


def _three_models(cfg, model):
    """a vs b reverses with the template; c is far behind both except on one cheap configuration, where it
    leads both: every pair flips."""
    if model == "c":
        return 0.95 if cfg.config_id.endswith("/T1/greedy/3shot/logprob") else 0.2
    return _reverses(cfg, model)


def _far_ahead(cfg, model):
    return 0.8 if model == "a" else 0.35


def _ahead_by_template(cfg, model):
    lead = {"T1": 0.45, "T2": 0.4, "T3": 0.35, "T4": 0.3}[cfg.template]
    return 0.4 + lead if model == "a" else 0.4


# synthetic worlds (accuracy(cfg, model) -> chance of a right answer; TruthfulQA's 48 configurations) where the
# law holds a flip (a win each way, each large enough for 300 items to certify), and where it holds none
FLIP_WORLDS = {
    "reverses with template": (_reverses, ("a", "b")),
    "one cheap reversal": (_one_cheap_reversal, ("a", "b")),
    "reversal on free-form only": (_reversal_on_free_form, ("a", "b")),
    "reversal under sampled CoT only": (_reversal_under_sampled_chain_of_thought, ("a", "b")),
    "smaller reversal (0.23)": (_smaller_reversal, ("a", "b")),
    "three models, three flips": (_three_models, ("a", "b", "c")),
}
STEADY_WORLDS = {
    "far ahead (0.80 vs 0.35)": (_far_ahead, ("a", "b")),
    "ahead by 0.30-0.45": (_ahead_by_template, ("a", "b")),
}


def correlated_problem(
    rng: np.random.Generator,
    accuracy: Callable[[object, str], float],
    copy: Callable[[object], float],
    n_items: int = 300,
    models: tuple[str, str] = ("a", "b"),
    benchmark: str = "truthfulqa",
    subset: int | None = None,
):
    """As synthetic_problem, with each free-form answer tied to the same item's log-probability answer of the
    same model, template and shots: every seed's free-form answer is that answer with probability copy(cfg),
    else a fresh draw (the answer read from the text is often the likeliest candidate). The paired differences
    of a free-form configuration and its log-probability twin then correlate (about copy for greedy decoding;
    `twin_correlation` measures it). `subset`: the problem's subset is the first `subset` of the n_items, the rest
    its pool beyond the subset (the twins' partner items, issue 56). Returns (problem, oracle, full-subset
    differences)."""
    from safetyrepro.certify.algorithm import BenchmarkProblem
    from safetyrepro.grid.twins import cheap_twin

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
        a, b = (np.array(list(scores[(cfg.config_id, m)].values()))[:subset] for m in models)
        full[cfg.config_id] = round(float((a - b).mean()), 12)

    def oracle(bench, config_id, model, item_ids):
        mine = scores[(config_id, model)]
        return np.array([mine[i] for i in item_ids])

    problem = BenchmarkProblem(
        benchmark, tuple(config_ids), tuple(models), ids[:subset], 5, pool=ids[subset or n_items :]
    )
    return problem, oracle, full


def twin_correlation(problem, oracle) -> dict[str, float]:
    """Per free-form configuration, the correlation of its paired differences with its twin's on the items."""
    from safetyrepro.grid.twins import pairings

    a, b = problem.models[:2]
    ids = list(problem.item_ids)
    out = {}
    for cid, twin in pairings(problem.closer_to, problem.config_ids).items():
        d = oracle(problem.benchmark, cid, a, ids) - oracle(problem.benchmark, cid, b, ids)
        c = oracle(problem.benchmark, twin, a, ids) - oracle(problem.benchmark, twin, b, ids)
        out[cid] = float(np.corrcoef(d, c)[0, 1])
    return out


@dataclass(frozen=True)
class StandInRecord:
    """What a stand-in driver's run_cell returns per item and seed (the live oracle reads these fields)."""

    item_id: str
    seed: int
    item_score: float

    def to_dict(self):
        return {"item_id": self.item_id, "seed": self.seed, "item_score": self.item_score}


def short(problem):
    """Templates T1 and T3 at 0 and 5 shots: 12 free-form configurations and their 4 twins (it keeps 2,000-item
    grids quick; the control acts per configuration, so the family's size changes little)."""
    keep = tuple(c for c in problem.config_ids if c.split("/")[1] in ("T1", "T3") and c.split("/")[3] != "3shot")
    return dataclasses.replace(problem, config_ids=keep)


def greedy_short(problem):
    """short's greedy configurations only (4 free-form, 4 twins): each item's score a 0/1 answer, where a twin
    can save the most (their ceilings are below half from the 0.15 lead down; five-seed means' are not)."""
    s = short(problem)
    return dataclasses.replace(s, config_ids=tuple(c for c in s.config_ids if c.split("/")[2] == "greedy"))
