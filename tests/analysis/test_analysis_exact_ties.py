"""The one comparison rule (safetyrepro/grid/exact.py): scores equal as fractions of a cell's item x seed
answers are ties, scores one answer apart are not, on grids built the way a sweep builds them
(per-seed shares summed in floating point, then averaged over the seeds)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from safetyrepro.analysis import api
from safetyrepro.analysis.paired.significance import exact_mean
from safetyrepro.grid.exact import exact_scores, snap_items
from safetyrepro.tasks.envelope import default_rules


def sweep_score(correct_per_seed: list[list[int]]) -> float:
    """A cell's score as sweep/records.py computes it: each seed's share of items, then their mean."""
    seed_scores = [sum(float(c) for c in seed) / len(seed) for seed in correct_per_seed]
    return sum(seed_scores) / len(seed_scores)


def test_the_same_count_split_differently_over_seeds_is_a_tie():
    # 35 correct of 24 items x 5 seeds, split 7/7/7/7/7 and 6/8/7/5/9 (the study's bbq/T3/diverse/3shot pair)
    def cell(split):
        return sweep_score([[1] * k + [0] * (24 - k) for k in split])

    a, b = cell([7, 7, 7, 7, 7]), cell([6, 8, 7, 5, 9])
    assert a != b  # the defect: the floats differ in their last bits
    ea, eb = exact_scores([a, b], 24, 5)
    assert ea == eb == 35 / 120
    one_more = exact_scores([cell([7, 7, 7, 7, 8])], 24, 5)[0]
    assert one_more == 36 / 120 and one_more > ea


def test_fractional_credit_and_scores_with_no_count():
    # a logprob item tied three ways is credited 1/3: 10 + 1/3 correct of 24 items is on the lattice 1/72
    score = (10 + 1 / 3) / 24
    assert exact_scores([score], 24, 1)[0] == Fraction(31, 72).numerator / Fraction(31, 72).denominator
    # a hand-written score that is no fraction of 24 answers is compared to 1e-12
    assert exact_scores([0.123456789012345], 24, 1)[0] == 0.123456789012
    assert np.isnan(exact_scores([np.nan], 24, 1)[0])


def test_item_means_that_are_zero_as_fractions_are_zero():
    d = np.array([0.2, 0.2, 0.2, -0.6])  # seed means of 5 seeds
    assert float(d.mean()) != 0.0
    assert exact_mean(d) == 0.0
    assert list(snap_items(np.array([0.1 + 0.2, 0.3]))) == [0.3, 0.3]


def _sweep_grid(rng: np.random.Generator, models: tuple[str, ...], n_items: int):
    """TruthfulQA's full envelope for `models`, each cell built as a sweep builds it from random 0/1
    answers per item and seed (a shared per-item difficulty so models tie often); with the exact
    count of correct answers of each cell."""
    rules = default_rules()
    configs = rules.configs("truthfulqa")
    difficulty = rng.random(n_items)
    rows, counts, items = [], {}, []
    for model in models:
        for cfg in configs:
            n_seeds = len(rules.seeds(cfg.decoding))
            answers = [(rng.random(n_items) > difficulty).astype(int) for _ in range(n_seeds)]
            counts[(model, cfg.config_id)] = Fraction(sum(int(x.sum()) for x in answers), n_items * n_seeds)
            rows.append(
                {
                    "model": model,
                    "benchmark": cfg.benchmark,
                    "template": cfg.template,
                    "decoding": cfg.decoding,
                    "shots": cfg.shots,
                    "scoring": cfg.scoring,
                    "precision": "fp32",
                    "package": "lm-eval",
                    "n_items": n_items,
                    "n_seeds": n_seeds,
                    "score": sweep_score([list(x) for x in answers]),
                    "parse_rate": 1.0,
                    "tier": rules.tier(cfg),
                    "config_id": cfg.config_id,
                }
            )
            for s, x in enumerate(answers):
                items += [
                    {"model": model, "config_id": cfg.config_id, "item_id": f"i{i}", "seed": s, "item_score": float(v)}
                    for i, v in enumerate(x)
                ]
    return pd.DataFrame(rows), counts, pd.DataFrame(items), [c.config_id for c in configs]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rho_flip_counts_equal_exact_fraction_counts_on_every_pair_row(seed):
    models = ("m1", "m2", "m3", "m4", "m5", "m6")
    frame, counts, _, configs = _sweep_grid(np.random.default_rng(seed), models, 24)
    table = api.rho_flip(frame)
    raw_rows_wrong = 0
    for a, b in itertools.combinations(models, 2):
        plus = sum(counts[(a, c)] > counts[(b, c)] for c in configs)
        minus = sum(counts[(a, c)] < counts[(b, c)] for c in configs)
        row = table[(table["model_a"] == a) & (table["model_b"] == b)].iloc[0]
        assert (row["n_plus"], row["n_minus"], row["n_zero"]) == (plus, minus, len(configs) - plus - minus)
        sa = frame[frame["model"] == a].set_index("config_id")["score"]
        sb = frame[frame["model"] == b].set_index("config_id")["score"]
        raw_rows_wrong += int((sa > sb).sum()) != plus or int((sa < sb).sum()) != minus
    assert raw_rows_wrong > 0  # raw floats would have miscounted some row: the grid exercises the rule


def test_orderings_and_the_item_tables_see_the_same_ties():
    frame, counts, items, configs = _sweep_grid(np.random.default_rng(5), ("m1", "m2", "m3"), 24)
    result = api.analyze(frame, items, n_resamples=50)
    tied = sum(len({counts[(m, c)] for m in ("m1", "m2", "m3")}) < 3 for c in configs)
    full = result.orderings_detail[result.orderings_detail["slice"] == "full"].iloc[0]
    assert full["n_tied_configs"] == tied
    tests = result.item_tests[result.item_tests["slice"] == "full"]
    for r in tests.itertuples():  # the items' difference is exactly the grid's, ties included
        exact = counts[(r.model_a, r.config_id)] - counts[(r.model_b, r.config_id)]
        assert (r.diff_items > 0) == (exact > 0) and (r.diff_items == 0) == (exact == 0)
        assert (r.diff_grid == 0) == (exact == 0)
