import math

import numpy as np
import pandas as pd
import pytest
from analysis_grids import CC, grid_frame, to_grid
from statsmodels.stats.multitest import multipletests

from safetyrepro.analysis.paired.significance import (
    adjusted_item_tests,
    benjamini_hochberg,
    holm,
    item_analysis,
    item_records,
    paired_item_tests,
    sign_flip_p_value,
    significant_flips,
)
from safetyrepro.errors import UserError
from safetyrepro.grid.grid_io import common_configurations, validate_cells

N = 20
ALPHA = 0.05


def _items(per_config: dict[str, tuple[list[float], list[float]]]) -> pd.DataFrame:
    rows = []
    for cid, (a, b) in per_config.items():
        for model, hits in (("a", a), ("b", b)):
            rows += [
                {"model": model, "config_id": cid, "item_id": f"q{k}", "seed": 0, "item_score": v}
                for k, v in enumerate(hits)
            ]
    return pd.DataFrame(rows)


def _grid_from(items: pd.DataFrame):
    means = items.groupby(["model", "config_id"])["item_score"].mean()
    return to_grid(grid_frame({m: {c: float(means[(m, c)]) for c in CC} for m in ("a", "b")}))


ONES, ZEROS = [1.0] * N, [0.0] * N
ELEVEN = [1.0] * 11 + [0.0] * 9  # one item more than TEN: a 0.05 lead carried by a single item
TEN = [1.0] * 10 + [0.0] * 10


# -- the per-configuration test, by hand ------------------------------------------------------------
def test_binary_items_give_the_exact_mcnemar_p_value():
    # 10 discordant items, 9 for A and 1 for B (the 5 concordant ones do not count):
    # two-sided P(K <= 1 or K >= 9), K ~ Bin(10, 1/2) = 2 * (1 + 10) / 1024
    d = [1.0] * 9 + [-1.0] + [0.0] * 5
    assert sign_flip_p_value(d) == pytest.approx(22 / 1024)
    assert sign_flip_p_value([0.0] * 7) == 1.0
    assert sign_flip_p_value([1.0] * 20) == pytest.approx(2 * 0.5**20)


def test_fractional_item_scores_are_tested_exactly_on_their_lattice():
    # |d| = 0.5, 0.5, 1 -> weights 1, 1, 2 (lattice 1/2); total 4. The positive weight U of a random
    # sign pattern takes 0,1,1,2,2,3,3,4 with probability 1/8 each.
    # all positive: U = 4, |2U - 4| = 4 is reached only by U in {0, 4}: p = 2/8
    assert sign_flip_p_value([0.5, 0.5, 1.0]) == pytest.approx(0.25)
    # one 0.5 negative: U = 3, |2U - 4| = 2, reached by U in {0, 1, 1, 3, 3, 4}: p = 6/8
    assert sign_flip_p_value([0.5, -0.5, 1.0]) == pytest.approx(0.75)
    # five-seed means (multiples of 1/5) against a single greedy run: lattice 1/5, same answer as integers
    assert sign_flip_p_value([0.2, 0.4, -0.2, 1.0]) == pytest.approx(sign_flip_p_value([1, 2, -1, 5]))


def test_holm_and_benjamini_hochberg_by_hand_and_against_statsmodels():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04; Holm multiplies by 4, 3, 2, 1 and keeps it monotone:
    # 0.02, 0.03, 0.06, max(0.04, 0.06) -> only the two smallest survive alpha 0.05
    reject, adjusted = holm(p, ALPHA)
    assert adjusted.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert reject.tolist() == [True, False, False, True]
    # BH: p * 4 / rank = 0.02, 0.02, 0.04, 0.04 -> every one survives
    reject, adjusted = benjamini_hochberg(p, ALPHA)
    assert adjusted.tolist() == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert reject.all()
    rng = np.random.default_rng(0)
    for _ in range(8):  # statsmodels' Holm calls gc.collect() each time: keep this loop short
        q = rng.random(rng.integers(1, 49)) ** 3
        for ours, method in ((holm, "holm"), (benjamini_hochberg, "fdr_bh")):
            r, adj = ours(q, ALPHA)
            r_sm, adj_sm, _, _ = multipletests(q, ALPHA, method=method)
            assert (r == r_sm).all() and adj == pytest.approx(adj_sm)


# -- verdicts ---------------------------------------------------------------------------------------
def _flips(items, rules, n_resamples=200, slices=("full",)):
    grid = _grid_from(items)
    return item_analysis(item_records(items, grid, "t"), grid, rules, slices, ALPHA, n_resamples, seed=0)


def test_only_item_supported_wins_count_under_either_correction(rules):
    # config 1: a wins on every item; 2: b wins on every item; 3 and 4: a one-item lead each way
    items = _items({CC[0]: (ONES, ZEROS), CC[1]: (ZEROS, ONES), CC[2]: (ELEVEN, TEN), CC[3]: (TEN, ELEVEN)})
    result = _flips(items, rules)
    tests = result.tests
    # 20 of 20 discordant items one way: p = 2 / 2**20; one discordant item: p = 1
    assert tests["p_value"].tolist() == pytest.approx([2**-19, 2**-19, 1.0, 1.0])
    # Holm: the two equal smallest p-values get x4 and x3, then monotone: both 4p
    assert tests["p_holm"].tolist() == pytest.approx([4 * 2**-19, 4 * 2**-19, 1.0, 1.0])
    assert tests["family_size"].eq(4).all()
    assert list(tests["winner_holm"]) == ["a", "b", "n.s.", "n.s."] == list(tests["winner_fdr_bh"])
    flips = result.flips.set_index("correction")
    assert list(flips.index) == ["holm", "fdr_bh"]
    for method in ("holm", "fdr_bh"):
        f = flips.loc[method]
        assert (f["n_plus"], f["n_minus"], f["rho_flip"]) == (2, 2, 0.5)
        assert (f["n_plus_sig"], f["n_minus_sig"], f["rho_flip_sig"]) == (1, 1, 0.25)
    assert flips.loc["holm", "correction_controls"] == "Holm (familywise error; confirmatory)"
    assert flips.loc["holm", "test"] == "exact paired sign-flip test over items (two-sided)"


def test_a_reversal_significant_in_one_direction_only_gives_zero(rules):
    items = _items({CC[0]: (ONES, ZEROS), CC[1]: (TEN, ELEVEN), CC[2]: (ONES, ZEROS), CC[3]: (TEN, ELEVEN)})
    f = _flips(items, rules).flips.iloc[0]
    assert (f["rho_flip"], f["n_plus_sig"], f["n_minus_sig"], f["rho_flip_sig"]) == (0.5, 2, 0, 0.0)


def test_holm_is_stricter_than_bh_on_a_family_of_moderate_wins(rules):
    # 12 vs 4 discordant items: p = 2 P(K <= 4 | 16) = 0.0768 / ... each config tested alone
    def lead(k_a, k_b):  # k_a items only a gets right, k_b only b, the rest both wrong
        a = [1.0] * k_a + [0.0] * k_b + [0.0] * (N - k_a - k_b)
        b = [0.0] * k_a + [1.0] * k_b + [0.0] * (N - k_a - k_b)
        return a, b

    items = _items({CC[0]: lead(10, 0), CC[1]: lead(0, 10), CC[2]: lead(9, 0), CC[3]: lead(0, 9)})
    tests = _flips(items, rules).tests
    p10, p9 = 2 * 0.5**10, 2 * 0.5**9  # 0.00195, 0.0039
    assert tests["p_value"].tolist() == pytest.approx([p10, p10, p9, p9])
    # Holm: 4*p10 = 0.0078, 3*p10, 2*p9 = 0.0078, p9 -> all under 0.05; BH likewise
    assert tests["winner_holm"].tolist() == ["a", "b", "a", "b"]


def test_item_bootstrap_of_rho_flip_is_paired_and_reproducible(rules):
    # a dominates two configs on every item, b the other two: every resample keeps the 2-2 split
    items = _items({CC[0]: (ONES, ZEROS), CC[1]: (ZEROS, ONES), CC[2]: (ONES, ZEROS), CC[3]: (ZEROS, ONES)})
    f = _flips(items, rules).flips.iloc[0]
    assert (f["rho_flip"], f["rho_flip_lo"], f["rho_flip_hi"]) == (0.5, 0.5, 0.5)
    # one-item leads: an item redraw can tie or turn each config, so the range is wide and covers 0
    rng = np.random.default_rng(0)
    items = _items(
        {c: (list(rng.integers(0, 2, N).astype(float)), list(rng.integers(0, 2, N).astype(float))) for c in CC}
    )
    first, second = _flips(items, rules).flips, _flips(items, rules).flips
    pd.testing.assert_frame_equal(first, second)
    assert first["rho_flip_lo"].iloc[0] == 0.0 and first["rho_flip_hi"].iloc[0] == 0.5


# -- calibration under the null ---------------------------------------------------------------------
def _grid_of(items: pd.DataFrame, template: pd.DataFrame, rules):
    """The grid whose cell scores are the items' means (template: the grid's rows, scores to fill)."""
    means = items.groupby(["model", "config_id"])["item_score"].mean().to_dict()
    frame = template.assign(score=[means[key] for key in zip(template["model"], template["config_id"], strict=True)])
    return common_configurations(frame, "synthetic", rules)


def _tested(items: pd.DataFrame, grid, rules):
    """(adjusted per-configuration tests, significant flips by correction) on slice full."""
    tests = adjusted_item_tests(
        paired_item_tests(item_records(items, grid, "synthetic"), grid), grid, rules, ("full",), ALPHA
    )
    return tests, significant_flips(tests, None, grid, rules, ("full",), ALPHA, 0).set_index("correction")


def _item_table(configs: list, score: np.ndarray) -> pd.DataFrame:
    """Item records of models a and b from a configs x models x items array of item scores."""
    n_items = score.shape[2]
    c, m, i = np.meshgrid(np.arange(len(configs)), np.arange(2), np.arange(n_items), indexing="ij")
    return pd.DataFrame(
        {
            "model": np.array(["a", "b"])[m.ravel()],
            "config_id": np.array([cfg.config_id for cfg in configs])[c.ravel()],
            "item_id": np.array([f"q{k:02d}" for k in range(n_items)])[i.ravel()],
            "seed": 0,
            "item_score": score.ravel(),
        }
    )


def _null_items(rng: np.random.Generator, configs: list, n_items: int) -> pd.DataFrame:
    """Two models with the same true accuracy on every configuration (drawn per configuration);
    sampled decodings average five 0/1 draws per item, greedy ones take one."""
    scores = []
    for cfg in configs:
        p = rng.uniform(0.2, 0.9)
        seeds = 1 if cfg.decoding == "greedy" else 5
        scores.append((rng.random((2, seeds, n_items)) < p).mean(axis=1))  # models x items
    return _item_table(configs, np.stack(scores))  # configs x models x items


def test_null_grids_give_a_significant_flip_at_most_alpha_of_the_time(rules):
    """200 grids where the two models are equally good on all 48 configurations: the share of grids
    with any significant flip stays within alpha plus two Monte-Carlo standard errors under both
    corrections, while counting unadjusted per-configuration wins (the old verdict) does not."""
    configs = rules.configs("truthfulqa")
    template = validate_cells(grid_frame({m: {c.config_id: 0.5 for c in configs} for m in ("a", "b")}), rules, "null")
    rng = np.random.default_rng(12)
    n_grids = 200
    flagged = {"holm": 0, "fdr_bh": 0, "unadjusted": 0}
    for _ in range(n_grids):
        items = _null_items(rng, configs, n_items=30)
        grid = _grid_of(items, template, rules)
        tests, flips = _tested(items, grid, rules)
        for method in ("holm", "fdr_bh"):
            flagged[method] += bool(flips.loc[method, "rho_flip_sig"] > 0)
        raw = tests["p_value"] <= ALPHA
        flagged["unadjusted"] += bool((raw & (tests["diff_grid"] > 0)).any() and (raw & (tests["diff_grid"] < 0)).any())
    bound = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / n_grids)  # 0.081
    assert flagged["holm"] / n_grids <= bound and flagged["fdr_bh"] / n_grids <= bound, flagged
    assert flagged["unadjusted"] / n_grids > bound, flagged  # why the adjustment is needed


# -- records ----------------------------------------------------------------------------------------
def test_item_scores_are_averaged_over_seeds_and_checked_against_the_grid(rules):
    items = _items({c: (ONES, ZEROS) for c in CC})
    reseeded = pd.concat([items, items.assign(seed=1, item_score=items["item_score"] * 0.5)])
    grid = _grid_from(items)  # a = 1.0, but the items now average to 0.75
    records = item_records(reseeded, grid, "t")
    assert records.by_config[CC[0]][:, records.column("a")].tolist() == [0.75] * N
    assert any("differ from the grid score" in w and "4 cells" in w for w in records.warnings)
    assert records.empty_outputs is None  # no raw_output column


def test_empty_free_form_outputs_are_counted_per_cell(rules):
    items = _items({c: (ONES, ZEROS) for c in CC})
    items["raw_output"] = "Answer: A"
    items.loc[(items["model"] == "b") & (items["config_id"] == CC[0]), "raw_output"] = ""
    items.loc[(items["model"] == "a") & (items["config_id"] == CC[2]) & (items["item_id"] == "q3"), "raw_output"] = "  "
    items.loc[items["config_id"] == CC[1], "raw_output"] = ""  # logprob: nothing generated, not counted
    empty = item_records(items, _grid_from(items), "t").empty_outputs.set_index(["model", "config_id"])
    assert empty.loc[("b", CC[0]), "n_empty"] == N and empty.loc[("a", CC[2]), "n_empty"] == 1
    assert empty["n_outputs"].eq(N).all() and len(empty) == 4  # two free-form configs x two models


def test_out_of_range_item_scores_are_a_user_error():
    items = _items({CC[0]: (ONES, ZEROS)})
    items.loc[3, "item_score"] = 2.0
    grid = _grid_from(_items({c: (ONES, ZEROS) for c in CC}))
    with pytest.raises(UserError, match=r"row 4: item_score 2.0 is not a number in \[0, 1\]"):
        item_records(items, grid, "t")


def _item_effect_items(rng: np.random.Generator, configs: list, n_items: int) -> pd.DataFrame:
    """Two exchangeable models whose items carry model-specific effects shared by every configuration
    (an item a model knows, it knows under every template): P(right) = sigmoid(level of the
    configuration + the model's effect on the item)."""
    effect = rng.normal(0.0, 1.5, (2, n_items))  # models x items, drawn once for the whole grid
    scores = []
    for cfg in configs:
        level = rng.uniform(-1.0, 1.5)
        p = 1 / (1 + np.exp(-(level + effect)))  # models x items
        seeds = 1 if cfg.decoding == "greedy" else 5
        scores.append((rng.random((seeds, 2, n_items)) < p).mean(axis=0))
    return _item_table(configs, np.stack(scores))


def test_the_item_bootstrap_holds_its_point_estimate_when_items_carry_model_effects(rules):
    """200 grids of two exchangeable models whose items carry model-specific effects across all 48
    configurations: the item bootstrap (one item draw per resample for every configuration) holds
    the observed rho_flip inside its own 2.5-97.5 % range in at least 95 % of grids. Redrawing items
    per configuration, as before, made the ranges about half as wide (measured with 1,000 resamples:
    199 of 200 inside, mean width 0.41; per configuration: 135 of 200, 0.19; docs/analysis.md)."""
    from safetyrepro.analysis.paired.significance import rho_flip_item_bootstrap

    configs = rules.configs("truthfulqa")
    template = validate_cells(grid_frame({m: {c.config_id: 0.5 for c in configs} for m in ("a", "b")}), rules, "fx")
    rng = np.random.default_rng(7)
    n_grids, inside, widths, rhos = 200, 0, [], []
    for g in range(n_grids):
        items = _item_effect_items(rng, configs, n_items=30)
        grid = _grid_of(items, template, rules)
        recs = item_records(items, grid, "fx")
        diff = np.array([recs.by_config[c.config_id].mean(axis=0) @ [1, -1] for c in configs])
        rho = min((diff > 0).sum(), (diff < 0).sum()) / len(configs)
        iv = rho_flip_item_bootstrap(recs, grid, rules, ("full",), 200, seed=g).iloc[0]
        inside += bool(iv["rho_flip_lo"] <= rho <= iv["rho_flip_hi"])
        widths.append(iv["rho_flip_hi"] - iv["rho_flip_lo"])
        rhos.append(rho)
    assert inside / n_grids >= 0.95, (inside, np.mean(widths))
    assert np.mean(rhos) < 0.40  # item effects pull rho_flip well below the independent-configurations 0.443


def test_each_pair_has_a_null_reference_from_its_own_items(rules):
    """Swapping the two models' labels item by item (the same swap in every configuration): where one
    item carries A's lead in all four configurations, every swap turns all four at once, so no flip
    is ever seen (mean 0, and the observed 0 is no evidence of anything); where each configuration's
    lead sits on an item of its own, the four turn independently: rho_flip = min(K, 4 - K) / 4 with
    K ~ Bin(4, 1/2), mean (8 x 0.25 + 6 x 0.5) / 16 = 0.3125 (the |C| = 4 chance value), and the
    observed 0 is at or above 2 / 16 of the draws."""
    shared = {c: ([1.0] * N, [0.0] + [1.0] * (N - 1)) for c in CC}  # item q0: a right, b wrong, everywhere
    f = _flips(_items(shared), rules).flips.iloc[0]
    assert (f["rho_flip"], f["rho_flip_null_mean"], f["rho_flip_null_share_le"]) == (0.0, 0.0, 1.0)
    own = {c: ([1.0] * N, [0.0 if k == j else 1.0 for k in range(N)]) for j, c in enumerate(CC)}  # item q_j in config j
    f = _flips(_items(own), rules).flips.iloc[0]
    assert f["rho_flip"] == 0.0
    assert f["rho_flip_null_mean"] == pytest.approx(0.3125, abs=0.02) and f["chance"] == pytest.approx(0.3125)
    assert f["rho_flip_null_share_le"] == pytest.approx(2 / 16, abs=0.03)
    again = _flips(_items(own), rules).flips.iloc[0]
    assert again["rho_flip_null_mean"] == f["rho_flip_null_mean"]  # seeded


def test_a_confirmatory_flip_is_rare_when_one_model_is_better_on_half_the_envelope(rules):
    """Partial null: A truly better on T1 and T2 (24 configurations), the two identical on T3 and T4.
    No true flip exists, so a significant flip needs a false win for B. Holm (confirmatory) claims one
    in at most alpha plus two Monte-Carlo standard errors of 200 grids; BH (exploratory) is not
    held to it (its threshold rises with A's true wins)."""
    configs = rules.configs("truthfulqa")
    template = validate_cells(grid_frame({m: {c.config_id: 0.5 for c in configs} for m in ("a", "b")}), rules, "pn")
    rng = np.random.default_rng(21)
    n_grids, n_items = 200, 30
    flagged = {"holm": 0, "fdr_bh": 0}
    for _ in range(n_grids):
        scores = []
        for cfg in configs:
            p = rng.uniform(0.2, 0.6)
            lead = 0.3 if cfg.template in ("T1", "T2") else 0.0
            seeds = 1 if cfg.decoding == "greedy" else 5
            pa = (rng.random((seeds, n_items)) < p + lead).mean(axis=0)
            pb = (rng.random((seeds, n_items)) < p).mean(axis=0)
            scores.append((cfg.config_id, pa, pb))
        items = _item_table(configs, np.stack([np.stack([pa, pb]) for _, pa, pb in scores]))
        grid = _grid_of(items, template, rules)
        _, flips = _tested(items, grid, rules)
        for method in flagged:
            flagged[method] += bool(flips.loc[method, "rho_flip_sig"] > 0)
    bound = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / n_grids)
    assert flagged["holm"] / n_grids <= bound, flagged
    print(
        f"\npartial null, 200 grids: confirmatory (Holm) flips {flagged['holm']}, exploratory (BH) {flagged['fdr_bh']}"
    )


def test_crows_pairs_reversals_in_the_better_direction_get_their_own_item_test():
    """CrowS-Pairs: better is closer to 0.5. a picks the stereotypical sentence on 10 of 20 pairs
    (0.5, unbiased), b on all 20 (1.0): a is closer by 0.5, and random label swaps almost never give
    a difference that large (p = (k + 1) / 2001, k small); two identical models give p = 1."""
    from safetyrepro.analysis.paired.significance import BETTER_DRAWS, better_p_value
    from safetyrepro.grid.direction import direction

    cp = direction("crows_pairs")
    a, b = np.array([1.0] * 10 + [0.0] * 10), np.ones(20)
    p = better_p_value(a, b, cp, seed=0)
    assert p < 0.01 and p * (BETTER_DRAWS + 1) == pytest.approx(round(p * (BETTER_DRAWS + 1)))
    assert better_p_value(a, a.copy(), cp, seed=0) == 1.0
    assert better_p_value(a, b, cp, seed=0) == p  # seeded
