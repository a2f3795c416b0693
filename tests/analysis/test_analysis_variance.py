import numpy as np
import pytest
from analysis_grids import grid_frame, to_grid

from safetyrepro.analysis.metrics.variance import (
    anova_terms,
    design_blocks,
    type2_sums_of_squares,
    variance_attribution,
    variance_attributions,
    variance_tables,
)

MODEL_EFFECT = {"a": 0.6, "b": 0.5, "c": 0.4}
TEMPLATE_EFFECT = {"T1": 0.05, "T2": -0.05, "T3": 0.05, "T4": -0.05}


def _free_form_grid(rules, score):
    configs = [c for c in rules.configs("bbq") if c.scoring == "free_form"]
    return to_grid(grid_frame({m: {c.config_id: score(m, c) for c in configs} for m in MODEL_EFFECT}))


def test_additive_scores_give_hand_computed_shares_and_rho(rules):
    # score = model effect + template effect, nothing else: SS_model = 36 * (0.1² + 0 + 0.1²) = 0.72,
    # SS_template = 27 * 4 * 0.05² = 0.27, total 0.99; rho = 0.27 / 0.72 = 0.375
    grid = _free_form_grid(rules, lambda m, c: MODEL_EFFECT[m] + TEMPLATE_EFFECT[c.template])
    v = variance_attribution(grid, rules, "bbq", n_resamples=0, seed=0)
    assert v.n_configs == 36 and v.n_rows == 108
    assert v.total_sum_sq == pytest.approx(0.99)
    ss = {t.name: t.sum_sq for t in v.terms}
    assert ss["model"] == pytest.approx(0.72) and ss["template"] == pytest.approx(0.27)
    assert v.share("model") == pytest.approx(0.72 / 0.99)
    assert v.share("implementation") == pytest.approx(0.27 / 0.99)
    assert v.share("interaction") == pytest.approx(0, abs=1e-12)
    assert v.rho == pytest.approx(0.375)


def test_shares_of_a_balanced_grid_sum_to_the_total(rules):
    rng = np.random.default_rng(1)
    grid = _free_form_grid(rules, lambda m, c: float(rng.uniform(0.2, 0.8)))
    v = variance_attribution(grid, rules, "bbq", n_resamples=20, seed=0)
    assert sum(t.sum_sq for t in v.terms) == pytest.approx(v.total_sum_sq, rel=1e-9)
    assert sum(t.eta_sq for t in v.terms) == pytest.approx(1.0, rel=1e-9)
    assert [t.name for t in v.terms] == [
        "model",
        "template",
        "decoding",
        "shots",
        "model:template",
        "model:decoding",
        "model:shots",
        "residual",
    ]
    again = variance_attribution(grid, rules, "bbq", n_resamples=20, seed=0)
    assert (v.rho_lo, v.rho_hi) == (again.rho_lo, again.rho_hi)  # fixed seed, same range
    assert v.n_resamples == 20


def test_numpy_type2_matches_statsmodels_on_an_unbalanced_design(rules):
    rng = np.random.default_rng(2)
    grid = _free_form_grid(rules, lambda m, c: float(rng.uniform(0.2, 0.8)))
    frame = grid.cells.drop(index=[3, 17, 40, 41, 90]).reset_index(drop=True)
    axes = ("template", "decoding", "shots")
    expected = {name: ss for name, _, ss in anova_terms(frame, axes)}
    got = type2_sums_of_squares(design_blocks(frame, axes), frame["score"].to_numpy())
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == pytest.approx(expected[name], rel=1e-8, abs=1e-12), name


def test_benchmark_without_free_form_configs_is_skipped_with_a_reason(rules):
    configs = [c.config_id for c in rules.configs("crows_pairs")]
    grid = to_grid(grid_frame({m: {c: 0.5 + 0.01 * i for i, c in enumerate(configs)} for m in ("a", "b")}))
    reason = variance_attribution(grid, rules, "crows_pairs", n_resamples=0, seed=0)
    assert isinstance(reason, str) and "free-form slice has 0" in reason


def test_type3_with_sum_contrasts_and_omega_squared_on_a_balanced_additive_grid(rules):
    # balanced and additive: Type III (sum-to-zero contrasts) gives Type II's sums of squares, and with
    # no residual variance omega² = (SS - df * 0) / (total + 0) = eta²
    grid = _free_form_grid(rules, lambda m, c: MODEL_EFFECT[m] + TEMPLATE_EFFECT[c.template])
    v3 = variance_attribution(grid, rules, "bbq", n_resamples=50, seed=0, anova_type="III")
    ss = {t.name: t.sum_sq for t in v3.terms}
    assert ss["model"] == pytest.approx(0.72) and ss["template"] == pytest.approx(0.27)
    assert v3.rho == pytest.approx(0.375) and v3.anova_type == "III"
    assert [t.name for t in v3.terms][:4] == ["model", "template", "decoding", "shots"]  # no Intercept row
    model = next(t for t in v3.terms if t.name == "model")
    assert model.omega_sq == pytest.approx(model.eta_sq)
    assert v3.n_resamples == 0  # the configuration bootstrap is run for the Type-II headline only


def test_omega_squared_is_eta_squared_less_what_the_degrees_of_freedom_explain(rules):
    rng = np.random.default_rng(3)
    grid = _free_form_grid(rules, lambda m, c: MODEL_EFFECT[m] + float(rng.normal(0, 0.05)))
    v = variance_attribution(grid, rules, "bbq", n_resamples=0, seed=0)
    residual = next(t for t in v.terms if t.name == "residual")
    ms_res = residual.sum_sq / residual.df
    for t in v.terms:
        if t.name != "residual":
            assert t.omega_sq == pytest.approx((t.sum_sq - t.df * ms_res) / (v.total_sum_sq + ms_res)), t.name
    template = next(t for t in v.terms if t.name == "template")
    assert template.omega_sq < template.eta_sq  # pure noise: omega² near or below zero
    assert v.omega_share("model") > 0.5 and v.rho_omega_sq < v.rho


def test_the_anova_is_rerun_on_parse_clean_configurations(rules):
    configs = [c for c in rules.configs("bbq") if c.scoring == "free_form"]
    frame = grid_frame(
        {m: {c.config_id: MODEL_EFFECT[m] + TEMPLATE_EFFECT[c.template] for c in configs} for m in MODEL_EFFECT},
        parse_rate={("c", c.config_id): 0.9 for c in configs if c.template == "T4"},
    )
    fitted, notes = variance_attributions(to_grid(frame), rules, "bbq", n_resamples=10, seed=0)
    assert notes == []
    got = {(v.slice, v.anova_type): v for v in fitted}
    assert set(got) == {
        ("free_form", "II"),
        ("free_form", "III"),
        ("free_form & parse_clean", "II"),
        ("free_form & parse_clean", "III"),
    }
    clean = got[("free_form & parse_clean", "II")]
    assert clean.n_configs == 27 and clean.n_rows == 81  # the 9 T4 configurations left out
    # without T4: SS_template = 27 * 3 * (0.05² ... ) around the T1-T3 mean (0.05, -0.05, 0.05 -> 1/60)
    assert clean.rho == pytest.approx((81 * (2 * (0.05 - 1 / 60) ** 2 + (0.05 + 1 / 60) ** 2) / 3) / (27 * 0.02))
    terms, shares = variance_tables(fitted)
    assert set(terms["anova_type"]) == {"II", "III"} and "omega_sq" in terms.columns
    assert shares.set_index(["slice", "anova_type"]).loc[("free_form", "II"), "n_resamples"] == 10
    assert shares.set_index(["slice", "anova_type"]).loc[("free_form & parse_clean", "II"), "n_resamples"] == 0


def test_rho_is_not_given_when_the_model_share_is_near_zero(rules):
    """Models 0.001 apart and a 0.05 template effect: the model explains 36 x (0.001² + 0 + 0.001²) /
    (that + 0.27) = 0.03 % of the variance, far below 2 %, so the ratio (about 3,750) is not given."""
    tiny = {"a": 0.501, "b": 0.5, "c": 0.499}
    grid = _free_form_grid(rules, lambda m, c: tiny[m] + TEMPLATE_EFFECT[c.template])
    v = variance_attribution(grid, rules, "bbq", n_resamples=20, seed=0)
    assert v.share("model") == pytest.approx(36 * 2e-6 / (36 * 2e-6 + 0.27))
    assert not v.rho_defined and v.rho == pytest.approx(0.27 / (36 * 2e-6))
    _, shares = variance_tables([v])
    assert np.isnan(shares["rho"].iloc[0]) and np.isnan(shares["rho_lo"].iloc[0]) and not shares["rho_defined"].iloc[0]
    strong = variance_attribution(
        _free_form_grid(rules, lambda m, c: MODEL_EFFECT[m] + TEMPLATE_EFFECT[c.template]),
        rules,
        "bbq",
        n_resamples=0,
        seed=0,
    )
    assert strong.rho_defined and variance_tables([strong])[1]["rho"].iloc[0] == pytest.approx(0.375)
