"""A table registered in one file (toy_table.py) is in every output of `analyze` (issue 55): its csv, report.md and
report.html, and the GRID card (md and json); the tables' registry refuses a name twice. On issue 52's readings
case: 2 models x 4 BBQ configurations = 8 cells, parse rate 1.0 on six of them and 0.5 on model-b's T1 and T3
free-form cells (it reads 20 of 40 items on both), so the mean parse rate is (6 x 1.0 + 2 x 0.5) / 8."""

from __future__ import annotations

import importlib
import json
import sys

import pandas as pd
import pytest
import readings_grid as case

from safetyrepro.analysis import tables
from safetyrepro.cli import main

NAME = "cells_per_benchmark"


@pytest.fixture
def toy():
    """toy_table imported as a user's module is: its import registers the table (again, after a teardown)."""
    tables.unregister_table(NAME)
    loaded = sys.modules.get("toy_table")
    yield importlib.reload(loaded) if loaded else importlib.import_module("toy_table")
    tables.unregister_table(NAME)


def test_a_registered_table_is_in_every_output(tmp_path, toy, data_dir):
    grid, _ = case.write_case(tmp_path / "case")
    out = tmp_path / "analysis"
    assert main(["analyze", str(grid), "--out", str(out), "--no-figures"]) == 0
    table = pd.read_csv(out / f"{NAME}.csv")
    assert table.to_dict("records") == [{"benchmark": "bbq", "n_cells": 8, "parse_rate": (6 * 1.0 + 2 * 0.5) / 8}]
    report = (out / "report.md").read_text()
    assert "## Cells per benchmark" in report and "one row per benchmark: the cells analysed" in report
    assert report.index("## Cells per benchmark") < report.index("## Definitions")
    assert "Cells per benchmark" in (out / "report.html").read_text()
    says = "Cells per benchmark, with their mean parse rate"
    card = json.loads((out / "grid_card.json").read_text())
    assert card["registered_tables"] == [{"name": NAME, "file": f"{NAME}.csv", "rows": 1, "says": says}]
    assert f"- {says} ({NAME}: `{NAME}.csv`, 1 row)" in (out / "grid_card.md").read_text()


def test_a_name_is_registered_once_and_is_a_file_stem(toy):
    with pytest.raises(ValueError, match="registered already"):
        tables.register_table(NAME, title="t", caption="c")(lambda a: None)
    with pytest.raises(ValueError, match="lower-case letters"):
        tables.register_table("../x", title="t", caption="c")
