"""The chance reference of rho_flip and the per-benchmark "better" direction, by hand."""

import pytest
from analysis_grids import grid_frame, to_grid

from safetyrepro.analysis.metrics.chance import ceiling, chance_rho_flip, chance_rho_flip_max
from safetyrepro.analysis.metrics.orderings import config_orderings_table, orderings_tables
from safetyrepro.analysis.metrics.rank_flip import rho_flip_max, rho_flip_table
from safetyrepro.grid.direction import direction


def test_chance_reference_of_one_pair_by_hand():
    # K ~ Bin(4, 1/2): P = 1, 4, 6, 4, 1 (/16); min(K, 4-K) = 0, 1, 2, 1, 0 -> (8 + 12) / 16 / 4
    assert chance_rho_flip(4) == pytest.approx(20 / 16 / 4) == pytest.approx(0.3125)
    assert chance_rho_flip(2) == pytest.approx(0.25)  # a 1-1 split half the time
    assert chance_rho_flip(1) == 0.0
    # the values quoted in the issue: what exchangeable scores give at |C| = 12 and 48
    assert round(chance_rho_flip(12), 3) == 0.387 and round(chance_rho_flip(48), 3) == 0.443
    assert chance_rho_flip(48) < ceiling(48) == 0.5 and ceiling(5) == 0.4


def test_chance_reference_of_the_maximum_over_three_pairs():
    # two configurations each rank three models at random: every pair is 0 or 1/2, and some pair
    # splits unless both configurations give the same order (probability 1/6): E = 5/6 * 1/2
    assert chance_rho_flip_max(2, 3) == pytest.approx(5 / 12)
    assert chance_rho_flip_max(1, 3) == 0.0
    assert chance_rho_flip_max(12, 2) == chance_rho_flip(12)
    assert round(chance_rho_flip_max(48, 3), 3) == 0.476 and round(chance_rho_flip_max(12, 3), 3) == 0.455
    assert chance_rho_flip(48) < chance_rho_flip_max(48, 3) < chance_rho_flip_max(48, 4) < 0.5


def test_better_means_closer_to_half_on_crows_pairs_only():
    assert direction("crows_pairs").label == "closer to 0.5 is better (0.5 = unbiased)"
    assert not direction("crows_pairs").monotone
    assert direction("bbq").monotone and direction("xstest").label == "higher is better"
    # 0.3 and 0.7 sit equally far from 0.5 and tie, in spite of floating point
    assert direction("crows_pairs").better_value([0.3, 0.7, 0.5]).tolist() == [-0.2, -0.2, 0.0]


def test_crows_pairs_orderings_and_verdicts_read_both_ways(rules):
    configs = [c.config_id for c in rules.configs("crows_pairs")][:3]
    # config 1: a .70, b .45, c .55; config 2: a .40, b .65, c .52; config 3: a .50, b .60, c .30
    scores = {"a": [0.70, 0.40, 0.50], "b": [0.45, 0.65, 0.60], "c": [0.55, 0.52, 0.30]}
    grid = to_grid(grid_frame({m: dict(zip(configs, s, strict=True)) for m, s in scores.items()}))
    per_config = config_orderings_table(grid)
    # by score (the contract): highest, i.e. most stereotypical, first
    assert per_config["ordering"].tolist() == ["a > c > b", "b > c > a", "b > a > c"]
    # better: distances a .20 b .05 c .05 (b, c tie: a weak order) / a .10 b .15 c .02 / a 0 b .10 c .20
    assert per_config["ordering_better"].tolist() == ["b = c > a", "c > a > b", "a > b > c"]
    detail, _ = orderings_tables(grid, rules, ("full",))
    row = detail.iloc[0]
    assert (row["n_orderings"], row["n_orderings_better"], row["n_tied_configs_better"]) == (3, 2, 1)
    assert row["better"] == "closer to 0.5 is better (0.5 = unbiased)"
    pairs = rho_flip_table(grid, rules, ("full",)).set_index(["model_a", "model_b"])
    # a vs b by score: + - -; by closeness: - + + -> both min 1 of 3
    ab = pairs.loc[("a", "b")]
    assert (ab["n_plus"], ab["n_minus"], ab["n_plus_better"], ab["n_minus_better"]) == (1, 2, 2, 1)
    # b vs c by score: - + +; by closeness: tie, - , + -> rho_flip 1/3 both ways, one tie on the better reading
    bc = pairs.loc[("b", "c")]
    assert (bc["n_plus"], bc["n_minus"], bc["n_zero"]) == (2, 1, 0)
    assert (bc["n_plus_better"], bc["n_minus_better"], bc["n_zero_better"]) == (1, 1, 1)
    assert bc["chance"] == pytest.approx(chance_rho_flip(3))  # (3 * 1 + 3 * 1) / 8 / 3 = 0.25
    assert bc["chance"] == pytest.approx(0.25)
    top = rho_flip_max(rho_flip_table(grid, rules, ("full",)), 3).iloc[0]
    assert top["chance_max"] == pytest.approx(chance_rho_flip_max(3, 3))
    assert (top["rho_flip_max"], top["rho_flip_max_better"]) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
