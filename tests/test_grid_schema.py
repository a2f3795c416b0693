"""The grid's format has one home (safetyrepro/grid_schema.py): its columns are declared once, a row is
built by one function, a cell's file stem is computed once; sweep, import and analyze use them."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from safetyrepro.grid_schema import (
    GRID_COLUMNS,
    WRITTEN_COLUMNS,
    cell_stem,
    grid_row,
    written_order,
)

REPO = Path(__file__).resolve().parents[1]
SOURCES = [
    p
    for folder in ("safetyrepro", "safetyrepro_tasks", "adapters", "analysis", "crosspkg")
    for p in (REPO / folder).rglob("*.py")
    if "__pycache__" not in p.parts
]
HOME = REPO / "safetyrepro" / "grid_schema.py"
# the contract's leading columns written out as a literal: a second declaration of the grid
DECLARED = re.compile(r'"model",\s*"benchmark",\s*"template",\s*"decoding",\s*"shots",\s*"scoring"')


def test_the_grid_columns_are_declared_once():
    found = [p.relative_to(REPO).as_posix() for p in SOURCES if DECLARED.search(p.read_text(encoding="utf-8"))]
    assert found == ["safetyrepro/grid_schema.py"], found
    assert len(DECLARED.findall(HOME.read_text(encoding="utf-8"))) == 1


def test_a_cells_file_stem_is_computed_once():
    stems = [
        p.relative_to(REPO).as_posix()
        for p in SOURCES
        if p != HOME and re.search(r'config_id\.replace\("/",\s*"__"\)', p.read_text(encoding="utf-8"))
    ]
    assert stems == []
    assert cell_stem("bbq/T1/greedy/0shot/logprob") == "bbq__T1__greedy__0shot__logprob"


def test_a_row_holds_the_written_columns_in_order_then_its_extras():
    cfg = SimpleNamespace(benchmark="bbq", template="T2", decoding="moderate", shots=3, scoring="free_form")
    row = grid_row(
        "m",
        cfg,
        "fp32",
        "lm-eval",
        300,
        5,
        0.5,
        0.98,
        "core",
        "bbq/T2/moderate/3shot/free_form",
        seed_scores="{}",
        tie_rate=None,
    )
    assert list(row) == [*WRITTEN_COLUMNS, "seed_scores", "tie_rate"]
    assert (row["shots"], row["n_seeds"], row["status"]) == (3, 5, "ok")
    assert "status" not in grid_row("m", cfg, "fp32", "lm-eval", 1, 1, None, None, None, "x", status=None)
    assert WRITTEN_COLUMNS[: len(GRID_COLUMNS)] == GRID_COLUMNS
    assert written_order(["tie_rate", "score", "x", *GRID_COLUMNS]) == [*WRITTEN_COLUMNS, "tie_rate", "x"]
