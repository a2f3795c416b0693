"""The analysis on a grid of many models (issue 33): a 20-model grid analyses end to end, and the
vectorised and reduced computations equal the per-pair / per-resample ones they replace."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from make_synthetic_grid import synthetic_grid

from safetyrepro.analysis import api
from safetyrepro.analysis.metrics.attribution import (
    PAIR_CLASSIFIERS_MAX,
    _lgbm_params,
    encode_axes,
    shap_values,
)
from safetyrepro.analysis.metrics.bootstrap import maxima
from safetyrepro.analysis.metrics.chance import SIMULATED_DRAWS, chance_rho_flip_max
from safetyrepro.analysis.metrics.rank_flip import pair_columns, pair_counts, sign_counts
from safetyrepro.analysis.metrics.slices import slice_config_ids
from safetyrepro.analysis.metrics.variance import (
    AXES_IN_ANOVA,
    REFERENCE_MAX_PARAMS,
    ConfigTable,
    _rho_from_sums,
    anova_config_ids,
    anova_terms,
    config_level_bootstrap,
    config_level_terms,
    design_blocks,
    n_parameters,
    type2_sums_of_squares,
)
from safetyrepro.grid.direction import direction
from safetyrepro.grid.grid_io import model_pairs

N_MODELS = 20
BENCHMARKS = ("bbq", "crows_pairs")  # two benchmarks keep the 2 x 190 pair classifiers quick


@pytest.fixture(scope="module")
def many(rules):
    """20 models x bbq (48 configurations) and crows_pairs (12), with a per-model offset."""
    models = tuple(f"m{i:02d}" for i in range(N_MODELS))
    frame = synthetic_grid(7, rules, models=models)
    frame = frame[frame["benchmark"].isin(BENCHMARKS)].reset_index(drop=True)
    offset = dict(zip(models, np.random.default_rng(7).normal(0, 0.03, N_MODELS), strict=True))
    frame["score"] = (frame["score"] + frame["model"].map(offset)).clip(0.01, 0.99).round(3)  # some ties
    return frame, api.analyze(frame, n_resamples=40)


def test_a_20_model_grid_analyses_and_its_vectorised_pair_counts_are_the_per_pair_counts(many, rules):
    frame, a = many
    grid = a.grid
    assert len(grid.models) == N_MODELS and grid.benchmarks == BENCHMARKS
    pairs = model_pairs(grid.models)
    detail = a.rho_flip_detail.set_index(["benchmark", "slice", "model_a", "model_b"])
    n_checked = n_ties = 0
    for benchmark in grid.benchmarks:
        for name in a.options.slices:
            ids = slice_config_ids(grid, rules, benchmark, name)
            if not ids:
                continue
            m = grid.matrix(benchmark, config_ids=ids)
            mb = direction(benchmark).better_value(m)
            plus, minus, zero = sign_counts(m.to_numpy(), *pair_columns(m.columns))
            for k, (x, y) in enumerate(pairs):
                c = pair_counts(m[x].to_numpy(), m[y].to_numpy())
                cb = pair_counts(mb[x].to_numpy(), mb[y].to_numpy())
                assert (plus[k], minus[k], zero[k]) == (c.n_plus, c.n_minus, c.n_zero)
                row = detail.loc[(benchmark, name, x, y)]
                assert (row["n_plus"], row["n_minus"], row["n_zero"], row["n_configs"]) == (
                    c.n_plus,
                    c.n_minus,
                    c.n_zero,
                    c.n_configs,
                )
                assert (row["n_plus_better"], row["n_minus_better"], row["n_zero_better"]) == (
                    cb.n_plus,
                    cb.n_minus,
                    cb.n_zero,
                )
                assert row["rho_flip"] == c.rho_flip and row["rho_flip_better"] == cb.rho_flip
                assert (row["saturated"], row["d1"], row["d2"]) == (c.saturated, c.d1, c.d2)
                n_checked += 1
                n_ties += c.n_zero > 0
    assert n_checked == len(detail) and n_ties > 0  # ties are exercised too
    assert set(a.orderings_detail["n_possible"]) == {math.factorial(N_MODELS)}
    assert len(a.certificate) == 2 * len(detail)
    shares = a.variance_shares.set_index(["benchmark", "slice", "anova_type"])
    assert shares.loc[("bbq", "free_form", "II"), "n_finite_resamples"] == 40
    per_benchmark = a.attribution.classifier.groupby("benchmark")[["model_a", "model_b"]].apply(
        lambda g: len(g.drop_duplicates())
    )
    assert (per_benchmark <= min(PAIR_CLASSIFIERS_MAX, len(pairs))).all() and per_benchmark["bbq"] > 100


def test_certificate_extremes_are_the_per_pair_idxmax_and_idxmin(many, rules):
    _, a = many
    grid = a.grid
    cert = a.certificate[a.certificate["slice"] == "full"].set_index(["benchmark", "model_a", "model_b", "extreme"])
    for benchmark in grid.benchmarks:
        m = grid.matrix(benchmark)
        better = direction(benchmark).better_value(m)
        for x, y in model_pairs(grid.models)[::17]:
            ahead = better[x] - better[y]
            for extreme, cid in (("max", ahead.idxmax()), ("min", ahead.idxmin())):
                row = cert.loc[(benchmark, x, y, extreme)]
                assert row["config_id"] == cid and row["diff"] == m.at[cid, x] - m.at[cid, y]
                assert row["diff_better"] == ahead[cid]


def test_the_configuration_level_anova_equals_statsmodels_and_the_lstsq_bootstrap(many, rules):
    _, a = many
    grid = a.grid
    axes = AXES_IN_ANOVA
    six = grid.cells[grid.cells["model"].isin(grid.models[:6])]  # 48 parameters: past the reference size, quick
    for slice_name in ("free_form", "free_form & parse_clean"):
        ids = anova_config_ids(grid, rules, "bbq", slice_name)
        frame = six[six["config_id"].isin(ids)]
        if slice_name != "free_form":
            frame = frame[~frame["config_id"].isin(ids[::4])]  # unbalanced in the axes
        assert n_parameters(frame, axes) > REFERENCE_MAX_PARAMS
        table = ConfigTable.of(frame, axes)
        for anova_type in ("II", "III"):
            expected = anova_terms(frame, axes, anova_type)
            got = config_level_terms(table, axes, anova_type)
            assert [t[:2] for t in got] == [t[:2] for t in expected]
            for (name, _, ss), (_, _, want) in zip(got, expected, strict=True):
                assert ss == pytest.approx(want, rel=1e-9, abs=1e-12), (slice_name, anova_type, name)
        # resamples of configurations: weights on the configuration table = lstsq on the drawn rows
        frame = frame.sort_values(["config_id", "model"]).reset_index(drop=True)
        configs = frame["config_id"].unique()
        draws = np.random.default_rng(3).integers(0, len(configs), size=(4, len(configs)))
        draws[0, :5] = draws[0, 0]  # a configuration drawn several times
        blocks, y = design_blocks(frame, axes), frame["score"].to_numpy()
        rows_of = [np.flatnonzero(frame["config_id"].to_numpy() == c) for c in configs]
        got = config_level_bootstrap(table, axes, draws)
        for k, draw in enumerate(draws):
            idx = np.concatenate([rows_of[j] for j in draw])
            want = _rho_from_sums(type2_sums_of_squares({t: b[idx] for t, b in blocks.items()}, y[idx]), axes)
            assert got[k] == pytest.approx(want, rel=1e-9)


def test_shap_values_are_shaps_tree_explainer_values(many, rules):
    import warnings

    import lightgbm as lgb

    _, a = many
    grid = a.grid
    m = grid.matrix("bbq")
    x = encode_axes(
        grid.cells[grid.cells["benchmark"] == "bbq"]
        .drop_duplicates("config_id")
        .set_index("config_id")
        .loc[list(m.index)],
        rules,
    )
    y = (m["m00"] > m["m01"]).to_numpy().astype(int)
    clf = lgb.LGBMClassifier(**_lgbm_params(len(x), 0, n_estimators=50, num_leaves=4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(x, y)
        import shap

        expected = np.asarray(shap.TreeExplainer(clf).shap_values(x))
    assert np.array_equal(shap_values(clf, x), expected)


def _chance_max_reference(n: int, n_models: int, draws: int) -> float:
    """The simulation as it was written first: every pair over every draw."""
    rng = np.random.default_rng([n, n_models])
    scores = rng.random((draws, n, n_models))
    best = np.zeros(draws)
    for i, j in itertools.combinations(range(n_models), 2):
        k = (scores[:, :, i] > scores[:, :, j]).sum(axis=1)
        best = np.maximum(best, np.minimum(k, n - k))
    return float(best.mean() / n)


@pytest.mark.parametrize(("n", "n_models"), [(12, 4), (7, 6), (4, 9)])
def test_chance_max_with_early_stopping_is_the_full_simulation(n, n_models):
    assert chance_rho_flip_max.__wrapped__(n, n_models) == _chance_max_reference(n, n_models, SIMULATED_DRAWS)


def test_bootstrap_maxima_from_draw_weights_equal_the_resampled_slabs(many):
    from safetyrepro.analysis.metrics.bootstrap import _rho_max, draw_weights

    _, a = many
    m = a.grid.matrix("bbq")
    x = m.to_numpy()
    draws = np.random.default_rng(5).integers(0, len(x), size=(30, len(x)))
    rho, _ = maxima(x[draws], tuple(m.columns))
    assert np.array_equal(_rho_max(x, draw_weights(draws, len(x)), tuple(m.columns)), rho)
    slow = [
        max(
            min(np.sum(s[:, i] > s[:, j]), np.sum(s[:, i] < s[:, j]))
            for i, j in itertools.combinations(range(x.shape[1]), 2)
        )
        / len(x)
        for s in x[draws[:3]]
    ]
    assert list(rho[:3]) == slow
    assert isinstance(a.bootstrap, pd.DataFrame) and len(a.bootstrap) == 2 * len(a.grid.benchmarks)
