import pytest
from analysis_grids import CC, grid_frame, to_grid

from safetyrepro.analysis.metrics.rank_flip import (
    RHO_FLIP_COLUMNS,
    pair_counts,
    rho_flip_max,
    rho_flip_table,
)
from safetyrepro.analysis.metrics.verdict_certificate import verdict_certificate


def test_two_two_split_at_four_configs_saturates_at_half():
    c = pair_counts([0.6, 0.4, 0.7, 0.2], [0.5, 0.5, 0.6, 0.3])
    assert (c.n_plus, c.n_minus, c.n_zero, c.n_configs) == (2, 2, 0, 4)
    assert c.rho_flip == 0.5
    assert c.ceiling == 0.5
    assert c.saturated
    assert not c.d1 and not c.d2


def test_ties_lower_rho_flip_but_stay_in_the_denominator():
    # plus at configs 3 and 5, minus at 4, ties at 1 and 2: min(2, 1) / 5, not min(2, 1) / 3
    c = pair_counts([0.5, 0.6, 0.7, 0.4, 0.3], [0.5, 0.6, 0.6, 0.5, 0.2])
    assert (c.n_plus, c.n_minus, c.n_zero) == (2, 1, 2)
    assert c.rho_flip == pytest.approx(0.2)
    assert c.ceiling == pytest.approx(0.4)  # floor(5/2)/5
    assert not c.saturated


def test_minus_and_ties_without_plus_satisfy_d1_not_d2():
    c = pair_counts([0.4, 0.5, 0.3], [0.5, 0.5, 0.6])
    assert (c.n_plus, c.n_minus, c.n_zero) == (0, 2, 1)
    assert c.rho_flip == 0.0
    assert c.d1 and not c.d2


def test_strict_dominance_satisfies_d2():
    c = pair_counts([0.9, 0.8], [0.1, 0.2])
    assert c.d1 and c.d2 and c.rho_flip == 0.0


def test_ties_are_exact_float_comparisons():
    # 0.1 + 0.2 != 0.3 in binary floating point: that is a strict win, not a tie
    c = pair_counts([0.1 + 0.2], [0.3])
    assert (c.n_plus, c.n_zero) == (1, 0)


def test_table_orients_pairs_alphabetically_and_keeps_contract_columns(rules):
    # "zeta" is listed first but "alpha" sorts first, so it is model_a and n_plus counts alpha's wins
    frame = grid_frame(
        {
            "zeta": dict(zip(CC, [0.5, 0.5, 0.6, 0.3], strict=True)),
            "alpha": dict(zip(CC, [0.6, 0.4, 0.7, 0.3], strict=True)),
        }
    )
    grid = to_grid(frame)
    table = rho_flip_table(grid, rules, ("full", "conservative_core", "free_form"))
    assert tuple(table.columns[: len(RHO_FLIP_COLUMNS)]) == RHO_FLIP_COLUMNS
    full = table[table["slice"] == "full"].iloc[0]
    assert (full["model_a"], full["model_b"]) == ("alpha", "zeta")
    assert (full["n_plus"], full["n_minus"], full["n_zero"], full["n_configs"]) == (2, 1, 1, 4)
    assert full["rho_flip"] == 0.25
    ff = table[table["slice"] == "free_form"].iloc[0]  # configs 1 and 3: alpha wins both
    assert (ff["n_plus"], ff["n_minus"], ff["n_configs"], ff["rho_flip"], ff["ceiling"]) == (2, 0, 2, 0.0, 0.5)
    assert ff["d1"] and ff["d2"]


def test_maximum_names_every_pair_that_attains_it(rules):
    frame = grid_frame(
        {
            "a": dict(zip(CC, [0.6, 0.4, 0.7, 0.2], strict=True)),
            "b": dict(zip(CC, [0.5, 0.5, 0.6, 0.3], strict=True)),
            "c": dict(zip(CC, [0.9, 0.9, 0.9, 0.9], strict=True)),
        }
    )
    table = rho_flip_table(to_grid(frame), rules, ("full",))
    top = rho_flip_max(table).iloc[0]
    assert top["rho_flip_max"] == 0.5 and top["pairs"] == "a vs b" and top["saturated"]
    assert top["n_pairs_with_reversal"] == 1


def test_verdict_certificate_names_the_extreme_configurations(rules):
    frame = grid_frame(
        {"a": dict(zip(CC, [0.6, 0.4, 0.9, 0.2], strict=True)), "b": dict(zip(CC, [0.5, 0.5, 0.6, 0.4], strict=True))}
    )
    cert = verdict_certificate(to_grid(frame), rules, ("full",))
    top = cert[cert["extreme"] == "max"].iloc[0]
    low = cert[cert["extreme"] == "min"].iloc[0]
    assert (top["config_id"], top["score_a"], top["score_b"]) == (CC[2], 0.9, 0.6)
    assert (low["config_id"], low["score_a"], low["score_b"]) == (CC[3], 0.2, 0.4)
    assert top["diff"] == pytest.approx(0.3) and low["diff"] == pytest.approx(-0.2)
