"""Tiny hand-written grids go through the whole command: surrogates and ANOVA step aside with a
note, figures are still drawn, and item records found beside a grid never break the run."""

import pandas as pd
import pytest
from analysis_grids import CC, grid_frame, write

from safetyrepro.cli import main


def _tiny(tmp_path):
    frame = grid_frame(
        {"a": dict(zip(CC, [0.6, 0.4, 0.7, 0.2], strict=True)), "b": dict(zip(CC, [0.5, 0.5, 0.6, 0.3], strict=True))}
    )
    return write(frame, tmp_path / "grid.csv")


def test_a_four_config_grid_is_analysed_with_notes_for_what_it_cannot_support(tmp_path, capsys):
    grid = _tiny(tmp_path)
    assert main(["analyze", str(grid), "--out", str(tmp_path / "out"), "--bootstrap", "50"]) == 0
    out = tmp_path / "out"
    report = (out / "report.md").read_text()
    assert "regressor skipped: 8 cells, fewer than 20" in report
    assert "classifier truthfulqa a vs b: skipped, 2 wins for a and 2 for b are too few" in report
    assert "ANOVA skipped for truthfulqa: 4 free-form cells cannot fit 4 parameters" in report
    assert "significant flips skipped: no per-item records" in report
    assert not (out / "figures" / "shap.png").exists()
    # one pair, one benchmark: rho_flip is 0.500 everywhere, so its surface would show nothing; a sentence says so
    assert not (out / "figures" / "rho_flip_surface.png").exists()
    assert "(Figure left out: rho_flip on slice full (every pair and benchmark) is 0.500 everywhere" in report
    assert (out / "figures" / "score_ranges.png").stat().st_size > 5_000
    rho = pd.read_csv(out / "rho_flip.csv").set_index("slice")
    assert rho.loc["full", "rho_flip"] == 0.5 and rho.loc["conservative_core", "ceiling"] == 0.5
    assert "truthfulqa   |C|=4   rho_flip max 0.500 (a vs b)" in capsys.readouterr().out


def test_unusable_items_beside_the_grid_only_warn_but_named_ones_fail(tmp_path, capsys):
    grid = _tiny(tmp_path)
    (tmp_path / "items.csv").write_text("model,config_id,item_id\na,x,1\n")
    assert main(["analyze", str(grid), "--out", str(tmp_path / "out"), "--no-figures", "--bootstrap", "20"]) == 0
    assert "found beside the grid but not used: items file" in capsys.readouterr().err
    assert main(["analyze", str(grid), "--out", str(tmp_path / "out"), "--items", str(tmp_path / "items.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lacks column(s) seed, item_score" in err


def test_items_beside_the_grid_are_used(tmp_path, capsys):
    grid = _tiny(tmp_path)
    frame = pd.read_csv(grid)
    rows = [
        {
            "model": r.model,
            "config_id": r.config_id,
            "item_id": k,
            "seed": 0,
            "item_score": 1.0 if k < round(r.score * 10) else 0.0,
        }
        for r in frame.itertuples()
        for k in range(10)
    ]
    pd.DataFrame(rows).to_parquet(tmp_path / "items.parquet")
    assert main(["analyze", str(grid), "--out", str(tmp_path / "out"), "--no-figures", "--bootstrap", "200"]) == 0
    tests = pd.read_csv(tmp_path / "out" / "item_tests.csv")
    full = tests[tests["slice"] == "full"]
    assert len(full) == 4 and (full["n_items"] == 10).all() and (full["family_size"] == 4).all()
    assert full["diff_items"].round(6).tolist() == [0.1, -0.1, 0.1, -0.1]
    assert set(tests["slice"]) == {
        "full",
        "core",
        "excl_t4",
        "excl_diverse",
        "free_form",
        "logprob",
        "parse_clean",
        "conservative_core",
    }


def test_the_console_gives_crows_pairs_reversals_in_the_better_direction(tmp_path, capsys, rules):
    # a scores higher everywhere (no raw reversal), but b is closer to 0.5 in three of four configurations
    cp = [c.config_id for c in rules.configs("crows_pairs")][:4]
    frame = grid_frame(
        {"a": dict(zip(cp, [0.9, 0.6, 0.7, 0.55], strict=True)), "b": dict(zip(cp, [0.5, 0.45, 0.2, 0.5], strict=True))}
    )
    grid = write(frame, tmp_path / "grid.csv")
    assert main(["analyze", str(grid), "--out", str(tmp_path / "out"), "--no-figures", "--bootstrap", "20"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("crows_pairs"))
    assert "rho_flip max 0.000 (no pair reverses)" in line
    assert "closer to 0.5 is better (0.5 = unbiased): rho_flip max 0.250 (a vs b)" in line
    card = (tmp_path / "out" / "grid_card.md").read_text()
    assert "| 0.250 (a vs b) |" in card
    # the certificate names the configurations that favour each model in the better direction: distances
    # a .40 .10 .20 .05, b 0 .05 .30 0 -> a most ahead on the third (by .10), b on the first (by .40)
    cert = pd.read_csv(tmp_path / "out" / "verdict_certificate.csv")
    cert = cert[(cert["benchmark"] == "crows_pairs") & (cert["slice"] == "full")].set_index("extreme")
    assert cert.loc["max", "config_id"] == cp[2] and cert.loc["max", "diff_better"] == pytest.approx(0.1)
    assert cert.loc["min", "config_id"] == cp[0] and cert.loc["min", "diff_better"] == pytest.approx(-0.4)
    assert cert.loc["max", "diff"] == pytest.approx(0.5)  # raw: a .70, b .20
