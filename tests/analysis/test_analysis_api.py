"""The Python API on DataFrames gives the CLI's numbers: the same grid through `api` and through
`safetyrepro analyze` gives the same tables, and bad input is the same one-line error."""

import pandas as pd
import pytest
from analysis_grids import CC, grid_frame, write

from safetyrepro.analysis import api
from safetyrepro.cli import main
from safetyrepro.errors import UserError


def _grid_and_items():
    frame = grid_frame(
        {
            "a": dict(zip(CC, [0.6, 0.4, 0.7, 0.2], strict=True)),
            "b": dict(zip(CC, [0.5, 0.5, 0.6, 0.3], strict=True)),
            "c": dict(zip(CC, [0.3, 0.6, 0.5, 0.5], strict=True)),
        }
    )
    items = pd.DataFrame(
        [
            {
                "model": r.model,
                "config_id": r.config_id,
                "item_id": f"q{k}",
                "seed": 0,
                "item_score": 1.0 if k < round(r.score * 10) else 0.0,
            }
            for r in frame.itertuples()
            for k in range(10)
        ]
    )
    return frame, items


def test_the_api_gives_the_tables_the_cli_writes(tmp_path, capsys):
    frame, items = _grid_and_items()
    path = write(frame, tmp_path / "run" / "grid.csv")
    items.to_parquet(tmp_path / "run" / "items.parquet")
    assert main(["analyze", str(path), "--out", str(tmp_path / "cli"), "--no-figures", "--bootstrap", "200"]) == 0
    cli = {
        n: pd.read_csv(tmp_path / "cli" / n)
        for n in ("rho_flip_detail.csv", "orderings_detail.csv", "significant_flips.csv", "rho_flip_max.csv")
    }
    grid = pd.read_csv(path)
    full = cli["rho_flip_detail.csv"][cli["rho_flip_detail.csv"]["slice"] == "full"].reset_index(drop=True)
    pd.testing.assert_frame_equal(api.rho_flip(grid).reset_index(drop=True), full, check_dtype=False)
    a_vs_b = api.rho_flip(grid).set_index(["model_a", "model_b"]).loc[("a", "b")]
    assert (a_vs_b["n_plus"], a_vs_b["n_minus"], a_vs_b["rho_flip"]) == (2, 2, 0.5)  # by hand: + - + -
    orders = cli["orderings_detail.csv"]
    pd.testing.assert_frame_equal(
        api.orderings(grid).reset_index(drop=True),
        orders[orders["slice"] == "full"].reset_index(drop=True),
        check_dtype=False,
    )
    result = api.analyze(grid, items=items, n_resamples=200)
    pd.testing.assert_frame_equal(
        result.rho_flip_max.reset_index(drop=True), cli["rho_flip_max.csv"], check_dtype=False
    )
    pd.testing.assert_frame_equal(
        result.significant_flips.reset_index(drop=True), cli["significant_flips.csv"], check_dtype=False
    )
    flips = api.significant_flips(grid, items, n_resamples=200)
    pd.testing.assert_frame_equal(
        flips.reset_index(drop=True),
        cli["significant_flips.csv"][cli["significant_flips.csv"]["slice"] == "full"].reset_index(drop=True),
        check_dtype=False,
    )
    written = result.report(tmp_path / "api", figures=False)
    assert (tmp_path / "api" / "report.md").is_file() and (tmp_path / "api" / "grid_card.json").is_file()
    assert (tmp_path / "api" / "rho_flip.csv").read_bytes() == (tmp_path / "cli" / "rho_flip.csv").read_bytes()
    assert tmp_path / "api" / "grid.csv" in written and set(result.tables()) >= {"rho_flip.csv", "orderings.csv"}
    import json

    card = json.loads((tmp_path / "api" / "grid_card.json").read_text())["analysis"]["significance"]
    assert card["confirmatory"] == "holm" and len(card["pairs"]) == 3  # a-b, a-c, b-c on truthfulqa
    pair = next(p for p in card["pairs"] if (p["model_a"], p["model_b"]) == ("a", "b"))
    assert pair["rho_flip"] == 0.5 and pair["chance"] == pytest.approx(0.3125)
    assert "| truthfulqa | a vs b | 4 | 0.500 | 0.312 |" in (tmp_path / "api" / "grid_card.md").read_text()


def test_a_bad_grid_dataframe_is_the_same_one_line_error():
    frame, _ = _grid_and_items()
    with pytest.raises(UserError, match="grid the grid DataFrame lacks column"):
        api.rho_flip(frame.drop(columns=["score"]))
    with pytest.raises(UserError, match="unknown slice"):
        api.rho_flip(frame, slices=["nope"])
    with pytest.raises(UserError, match="needs at least one resample"):
        api.analyze(frame, n_resamples=0)
