import numpy as np
import pandas as pd
import pytest
from analysis_grids import CC, grid_frame, to_grid

from safetyrepro.analysis.significance import item_records, paired_item_tests, significant_flips
from safetyrepro.errors import UserError

N = 20


def _items(per_config: dict[str, tuple[list[float], list[float]]]) -> pd.DataFrame:
    rows = []
    for cid, (a, b) in per_config.items():
        for model, hits in (("a", a), ("b", b)):
            rows += [{"model": model, "config_id": cid, "item_id": f"q{k}", "seed": 0, "item_score": v}
                     for k, v in enumerate(hits)]
    return pd.DataFrame(rows)


def _grid_from(items: pd.DataFrame):
    means = items.groupby(["model", "config_id"])["item_score"].mean()
    return to_grid(grid_frame({m: {c: float(means[(m, c)]) for c in CC} for m in ("a", "b")}))


ONES, ZEROS = [1.0] * N, [0.0] * N
ELEVEN = [1.0] * 11 + [0.0] * 9  # one item more than TEN: a 0.05 lead carried by a single item
TEN = [1.0] * 10 + [0.0] * 10


def test_only_item_supported_wins_count_and_both_counts_sit_side_by_side(rules):
    # config 1: a wins on every item; 2: b wins on every item; 3 and 4: a one-item lead each way
    items = _items({CC[0]: (ONES, ZEROS), CC[1]: (ZEROS, ONES), CC[2]: (ELEVEN, TEN), CC[3]: (TEN, ELEVEN)})
    grid = _grid_from(items)
    tests = paired_item_tests(item_records(items, grid, "t"), grid, n_resamples=500, alpha=0.05, seed=0)
    assert list(tests["significant_winner"]) == ["a", "b", "n.s.", "n.s."]
    # one drawn-or-not item decides configs 3 and 4: P(not drawn) = 0.95**20 = 0.36 > 0.025, so 0 is inside
    assert tests.loc[2, "ci_low"] == 0.0 and tests.loc[2, "diff_items"] == pytest.approx(0.05)
    flips = significant_flips(tests, grid, rules, ("full",), 500, 0.05).iloc[0]
    assert (flips["n_plus"], flips["n_minus"], flips["rho_flip"]) == (2, 2, 0.5)
    assert (flips["n_plus_sig"], flips["n_minus_sig"], flips["rho_flip_sig"]) == (1, 1, 0.25)
    assert flips["test"] == "paired percentile bootstrap over items" and flips["n_resamples"] == 500


def test_a_reversal_significant_in_one_direction_only_gives_zero(rules):
    items = _items({CC[0]: (ONES, ZEROS), CC[1]: (TEN, ELEVEN), CC[2]: (ONES, ZEROS), CC[3]: (TEN, ELEVEN)})
    grid = _grid_from(items)
    tests = paired_item_tests(item_records(items, grid, "t"), grid, 300, 0.05, 0)
    flips = significant_flips(tests, grid, rules, ("full",), 300, 0.05).iloc[0]
    assert (flips["rho_flip"], flips["n_plus_sig"], flips["n_minus_sig"], flips["rho_flip_sig"]) == (0.5, 2, 0, 0.0)


def test_item_scores_are_averaged_over_seeds_and_checked_against_the_grid(rules):
    items = _items({c: (ONES, ZEROS) for c in CC})
    reseeded = pd.concat([items, items.assign(seed=1, item_score=items["item_score"] * 0.5)])
    grid = _grid_from(items)  # a = 1.0, but the items now average to 0.75
    records = item_records(reseeded, grid, "t")
    assert records.by_config[CC[0]]["a"].tolist() == [0.75] * N
    assert any("differ from the grid score" in w and "4 cells" in w for w in records.warnings)


def test_out_of_range_item_scores_are_a_user_error():
    items = _items({CC[0]: (ONES, ZEROS)})
    items.loc[3, "item_score"] = 2.0
    grid = _grid_from(_items({c: (ONES, ZEROS) for c in CC}))
    with pytest.raises(UserError, match=r"row 4: item_score 2.0 is not a number in \[0, 1\]"):
        item_records(items, grid, "t")


def test_fixed_seed_gives_the_same_intervals(rules):
    rng = np.random.default_rng(0)
    items = _items({c: (list(rng.integers(0, 2, N).astype(float)), list(rng.integers(0, 2, N).astype(float))) for c in CC})
    grid = _grid_from(items)
    first = paired_item_tests(item_records(items, grid, "t"), grid, 200, 0.05, 7)
    second = paired_item_tests(item_records(items, grid, "t"), grid, 200, 0.05, 7)
    pd.testing.assert_frame_equal(first, second)
