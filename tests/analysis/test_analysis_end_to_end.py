"""The synthetic full-size grid (3 models x 5 benchmarks, 612 cells) through `safetyrepro analyze`."""

import json
import subprocess
import sys
import time

import pandas as pd
import pytest
from make_synthetic_grid import main as make_grid

from safetyrepro.analysis.metrics.orderings import ORDERINGS_COLUMNS
from safetyrepro.analysis.metrics.rank_flip import RHO_FLIP_COLUMNS
from safetyrepro.cli import main

TABLES = (
    "rho_flip.csv",
    "rho_flip_detail.csv",
    "rho_flip_max.csv",
    "orderings.csv",
    "orderings_detail.csv",
    "config_orderings.csv",
    "concordance.csv",
    "tier_ablation.csv",
    "sdi.csv",
    "cfr.csv",
    "anova.csv",
    "variance_shares.csv",
    "shap_regressor.csv",
    "shap_pair_classifier.csv",
    "bootstrap.csv",
    "verdict_certificate.csv",
    "item_tests.csv",
    "significant_flips.csv",
)
PAPER = (
    "bbq",
    "crows_pairs",
    "toxigen",
    "truthfulqa",
    "xstest",
)  # the paper's identities; more benchmarks may be registered
FIGURES = (
    "wins_by_axes.png",
    "rho_flip_surface.png",
    "rho_flip_by_slice.png",
    "orderings.png",
    "score_ranges.png",
    "shap.png",
)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    assert make_grid([str(run), "--items", "30", "--run-json"]) == 0
    out = run / "analysis"
    started = time.perf_counter()
    rc = main(["analyze", str(run / "grid.csv"), "--out", str(out)])
    return rc, out, time.perf_counter() - started


def test_full_grid_runs_in_under_a_minute_and_writes_everything(analysed):
    rc, out, seconds = analysed
    assert rc == 0
    assert seconds < 60
    for name in (*TABLES, "report.md", "report.html", "grid_card.md", "grid_card.json"):
        assert (out / name).stat().st_size > 0, name
    for name in FIGURES:
        png = (out / "figures" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name


def test_contract_tables_have_exactly_the_design_columns_and_paper_sizes(analysed):
    _, out, _ = analysed
    rho = pd.read_csv(out / "rho_flip.csv")
    orders = pd.read_csv(out / "orderings.csv")
    assert tuple(rho.columns) == RHO_FLIP_COLUMNS
    assert tuple(orders.columns) == ORDERINGS_COLUMNS
    assert len(rho) == 3 * len(orders)
    orders = orders[orders["benchmark"].isin(PAPER)]
    assert len(orders) == 4 * 8 + 7  # crows_pairs has no free-form slice
    assert (rho["model_a"] < rho["model_b"]).all()
    assert ((rho["n_plus"] + rho["n_minus"] + rho["n_zero"]) == rho["n_configs"]).all()
    sizes = orders.pivot(index="slice", columns="benchmark", values="n_configs")
    assert sizes.loc["full"].to_dict() == {"bbq": 48, "crows_pairs": 12, "toxigen": 48, "truthfulqa": 48, "xstest": 48}
    assert sizes.loc["core", "bbq"] == 27 and sizes.loc["core", "crows_pairs"] == 9
    assert sizes.loc["excl_t4", "xstest"] == 36 and sizes.loc["excl_t4", "crows_pairs"] == 9
    assert sizes.loc["excl_diverse", "toxigen"] == 36 and sizes.loc["excl_diverse", "crows_pairs"] == 12
    assert sizes.loc["conservative_core", "truthfulqa"] == 4 and sizes.loc["conservative_core", "crows_pairs"] == 2
    # the generator parses T4 free-form badly on toxigen and xstest: 9 of 48 configs drop out
    assert sizes.loc["parse_clean", "toxigen"] == 39 and sizes.loc["parse_clean", "truthfulqa"] == 48


def test_cfr_median_panel_and_report(analysed):
    _, out, _ = analysed
    cfr = pd.read_csv(out / "cfr.csv")
    median = cfr[(cfr["theta"] == "median") & (cfr["slice"] == "full") & (cfr["benchmark"] != "crows_pairs")]
    assert median["cfr"].max() <= 0.5106383 + 1e-9 and (median["ceiling"].round(4) == 0.5106).all()
    assert cfr.loc[cfr["benchmark"] == "crows_pairs", "cfr"].isna().all()
    report = (out / "report.md").read_text()
    assert report.count("*How to read:*") >= 14
    assert "it does not replace the exact counts" in report
    assert "<table>" in (out / "report.html").read_text()
    card = json.loads((out / "grid_card.json").read_text())
    assert card["run_metadata"]["found"] and card["envelope"]["rules_match"] is True
    assert len(card["headline"]) == 5
    flips = pd.read_csv(out / "significant_flips.csv")
    assert (flips["rho_flip_sig"] <= flips["rho_flip"]).all() and (flips["n_resamples"] == 1000).all()


def test_significance_direction_and_chance_are_named_everywhere(analysed):
    _, out, _ = analysed
    flips = pd.read_csv(out / "significant_flips.csv")
    assert set(flips["correction"]) == {"holm", "fdr_bh"}
    plain = "exact paired sign-flip test over items (two-sided)"
    assert set(flips.loc[flips["benchmark"] != "crows_pairs", "test"]) == {plain}
    assert set(flips.loc[flips["benchmark"] == "crows_pairs", "test"]) == {
        plain + "; better reading: the same items, labels swapped item by item at random (Monte Carlo, 2000 seeded "
        "draws, two-sided, (k + 1) / (n + 1)), on the difference in the better reading"
    }
    higher = flips[flips["benchmark"] != "crows_pairs"]
    assert (higher["rho_flip_sig_better"] == higher["rho_flip_sig"]).all()  # better is higher: the same count
    assert (flips["rho_flip_lo"] <= flips["rho_flip_hi"]).all()
    # Holm controls more than BH: it never finds more significant wins on the same family
    wide = flips.pivot_table(
        index=["benchmark", "slice", "model_a", "model_b"], columns="correction", values="n_plus_sig"
    )
    assert (wide["holm"] <= wide["fdr_bh"]).all()
    tests = pd.read_csv(out / "item_tests.csv")
    assert {"p_value", "p_holm", "p_fdr_bh", "winner_holm", "winner_fdr_bh", "family_size"} <= set(tests.columns)
    assert (tests["p_holm"] >= tests["p_value"]).all() and (tests["p_fdr_bh"] >= tests["p_value"] - 1e-12).all()
    report = (out / "report.md").read_text()
    assert "Holm (controls the chance of any false win, familywise: the confirmatory reading" in report
    assert "FDR: exploratory only" in report
    assert "closer to 0.5 is better (0.5 = unbiased)" in report and "|C| = 48: ceiling 0.500, chance 0.443" in report
    assert "the full envelope (48 configurations)" in report
    html = (out / "report.html").read_text()
    assert 'src="figures/' not in html and html.count('src="data:image/png;base64,') == len(FIGURES)
    card = json.loads((out / "grid_card.json").read_text())
    crows = next(h for h in card["headline"] if h["benchmark"] == "crows_pairs")
    assert crows["better"] == "closer to 0.5 is better (0.5 = unbiased)" and round(crows["chance_max"], 3) == 0.455
    assert card["analysis"]["significance"]["corrections"]["holm"] == "Holm (familywise error; confirmatory)"
    variance = pd.read_csv(out / "variance_shares.csv")
    assert set(zip(variance["slice"], variance["anova_type"])) == {
        ("free_form", "II"),
        ("free_form", "III"),
        ("free_form & parse_clean", "II"),
        ("free_form & parse_clean", "III"),
    }
    # toxigen and xstest lose their 9 badly parsed T4 free-form configurations in the rerun
    clean = variance[(variance["slice"] == "free_form & parse_clean") & (variance["anova_type"] == "II")]
    assert clean[clean["benchmark"].isin(PAPER)].set_index("benchmark")["n_configs"].to_dict() == {
        "truthfulqa": 36,
        "bbq": 36,
        "toxigen": 27,
        "xstest": 27,
    }


def test_analyze_and_compare_modules_import_without_the_heavy_libraries():
    code = (
        "import sys, safetyrepro.analysis.cli, safetyrepro.analysis.compare_cli; "
        "print(sorted(m for m in ('pandas', 'numpy', 'matplotlib', 'lightgbm', 'shap', 'statsmodels') "
        "if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"
