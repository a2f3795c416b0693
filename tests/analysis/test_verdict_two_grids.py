"""`compare` folded into `verdict` (issue 55): `verdict GRID_A GRID_B` pairs two grids cell by cell as `compare`
does, printing and writing the same; `compare` stays as the old spelling (and for three grids or more); flags
that are for runs are refused beside two grids, and --out beside runs."""

from __future__ import annotations

import pandas as pd
import readings_grid as case

from safetyrepro.cli import main


def _grids(tmp_path):
    first, _ = case.write_case(tmp_path / "first")
    second = tmp_path / "second.csv"
    g = pd.read_csv(first)
    g.loc[0, "score"] = 0.6  # one cell measured otherwise
    g.to_csv(second, index=False)
    return str(first), str(second)


def test_verdict_on_two_grids_is_compare(tmp_path, capsys, data_dir):
    a, b = _grids(tmp_path)
    assert main(["compare", a, b, "--labels", "x", "y", "--out", str(tmp_path / "c")]) == 0
    compared = capsys.readouterr().out
    assert main(["verdict", a, b, "--labels", "x", "y", "--out", str(tmp_path / "v")]) == 0
    assert capsys.readouterr().out == compared.replace(str(tmp_path / "c"), str(tmp_path / "v"))
    for name in ("compare_cells.csv", "compare_summary.csv", "compare_report.md"):
        assert (tmp_path / "v" / name).read_bytes() == (tmp_path / "c" / name).read_bytes(), name


def test_run_flags_beside_two_grids_and_out_beside_runs_are_refused(tmp_path, capsys, data_dir):
    a, b = _grids(tmp_path)
    assert main(["verdict", a, b, "--margin", "0.05"]) == 2
    assert "two grids are compared cell by cell (as `compare` does): --margin is for runs" in capsys.readouterr().err
    grid, _ = case.write_case(tmp_path / "case")
    assert main(["verdict", case.A, case.B, "--grid", str(grid), "--out", str(tmp_path / "o")]) == 2
    assert "--out is for two grids" in capsys.readouterr().err
