import itertools

import numpy as np
import pandas as pd
import pytest
from analysis_grids import grid_frame, to_grid
from scipy.stats import kendalltau

from safetyrepro.analysis.metrics.orderings import (
    induced_ordering,
    ordering_label,
    orderings_reached,
    orderings_tables,
    ranking_concordance,
)


def test_ties_are_weak_orders_never_broken():
    assert induced_ordering({"b": 0.5, "a": 0.5, "c": 0.7}) == (("c",), ("a", "b"))
    assert ordering_label(induced_ordering({"qwen": 0.6255, "mistral": 0.5, "yi": 0.6255})) == "qwen = yi > mistral"
    # three strict configurations and two tied ones: 2 strict orders reached, 3 orders in all, 2 tied configs
    m = pd.DataFrame({"a": [0.9, 0.8, 0.1, 0.5, 0.5], "b": [0.5, 0.4, 0.5, 0.5, 0.5]}, index=list("vwxyz"))
    reached = orderings_reached(m)
    assert reached.counts == (("a = b", 2), ("a > b", 2), ("b > a", 1))
    assert (reached.n_orderings, reached.n_weak_orderings, reached.n_tied_configs) == (2, 3, 2)


def test_a_grid_reaching_all_six_orderings_reports_six(rules):
    configs = [c.config_id for c in rules.configs("xstest")][:6]
    scores = {"a": {}, "b": {}, "c": {}}
    for cid, perm in zip(configs, itertools.permutations("abc"), strict=True):
        for rank, model in enumerate(perm):
            scores[model][cid] = 0.9 - 0.1 * rank
    detail, _ = orderings_tables(to_grid(grid_frame(scores)), rules, ("full",))
    row = detail.iloc[0]
    assert (row["n_configs"], row["n_orderings"], row["n_possible"]) == (6, 6, 6)
    assert "c > b > a (1)" in row["orderings"]


def test_repeated_orderings_are_counted_once():
    m = pd.DataFrame({"a": [0.9, 0.8, 0.1], "b": [0.5, 0.4, 0.5]}, index=["x", "y", "z"])
    reached = orderings_reached(m)
    assert reached.n_orderings == 2 and reached.n_possible == 2
    assert reached.counts == (("a > b", 2), ("b > a", 1))


def test_tau_r_is_the_mean_over_config_pairs():
    # c1 = c2 (tau 1), c3 reversed (tau -1 with each): mean of (1, -1, -1)
    m = pd.DataFrame({"a": [0.3, 0.3, 0.1], "b": [0.2, 0.2, 0.2], "c": [0.1, 0.1, 0.3]})
    c = ranking_concordance(m)
    assert c.tau_r == pytest.approx(-1 / 3)
    assert c.n_config_pairs == 3 and c.n_undefined == 0
    assert c.order_mismatch_rate == pytest.approx(2 / 3)


def test_tau_r_handles_ties_as_average_ranks_like_scipy():
    m = pd.DataFrame({"a": [0.5, 0.3], "b": [0.5, 0.2], "c": [0.1, 0.1]})
    # sign vectors (a-b, a-c, b-c): (0, +, +) and (+, +, +): 2 / sqrt(2 * 3)
    assert ranking_concordance(m).tau_r == pytest.approx(2 / np.sqrt(6))
    assert ranking_concordance(m).tau_r == pytest.approx(kendalltau(m.iloc[0], m.iloc[1]).statistic)


def test_tau_r_leaves_out_configs_that_tie_every_model():
    m = pd.DataFrame({"a": [0.5, 0.3, 0.3], "b": [0.5, 0.2, 0.2]})
    c = ranking_concordance(m)
    assert (c.n_config_pairs, c.n_undefined, c.tau_r) == (3, 2, 1.0)
