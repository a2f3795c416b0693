"""The two readings of a free-form comparison (analysis/metrics/readings.py): form (parse rates paired by item) and
content (the items both models' replies were read on), and what a lead rests on. Numbers worked out by hand
in readings_grid.py's docstring."""

from __future__ import annotations

import pandas as pd
import pytest
import readings_grid as case

from safetyrepro.analysis.metrics import readings
from safetyrepro.analysis.pipeline import AnalysisOptions, run_analysis
from safetyrepro.grid.grid_io import load_grid
from safetyrepro.tasks.envelope import default_rules


def test_the_content_reading_is_taken_on_the_items_both_models_read():
    table = readings.content_table(case.item_records())
    assert list(table.columns) == list(readings.CONTENT_COLUMNS)
    assert sorted(table["config_id"]) == sorted(case.FREE)  # free-form configurations only
    row = table.set_index("config_id").loc[case.FREE[0]]
    assert (row["model_a"], row["model_b"], row["n_items"], row["n_both"]) == (case.A, case.B, 40, 20)
    assert (row["read_a"], row["read_b"]) == (1.0, 0.5)
    # form: 20 items read by A only, none by B only: exact p = 2 / 2**20
    assert row["form_p"] == pytest.approx(2 / 2**20)
    assert (row["content_a"], row["content_b"]) == (0.5, 0.8)
    assert row["content_diff"] == pytest.approx(-0.3)
    assert row["content_p"] == pytest.approx(case.CONTENT_P)


def test_read_flags_fall_back_to_the_prediction_and_logprob_is_always_read():
    frame = case.item_records().drop(columns=["parsed"])
    flags = readings.read_flags(frame)
    assert flags is not None and int(flags.sum()) == len(frame) - 2 * 20
    assert readings.read_flags(frame.drop(columns=["prediction"])) is None
    assert readings.content_table(frame.drop(columns=["prediction"])) is None
    strings = case.item_records().assign(parsed=lambda f: f["parsed"].map({True: "True", False: "False"}))
    assert int(readings.read_flags(strings).sum()) == len(frame) - 40


@pytest.mark.parametrize(
    ("codes", "basis"),
    [
        ("parse_rate", readings.FORMAT),
        ("parse_rate;empty", readings.FORMAT),
        ("empty;constant_answer", readings.FORMAT),
        ("constant_answer", readings.UNINFORMATIVE),
        ("no_better_than_majority", readings.UNINFORMATIVE),
        ("", readings.READABLE),
        (float("nan"), readings.READABLE),
    ],
)
def test_reason_codes_name_the_basis(codes, basis):
    assert readings.basis_of_reasons(codes) == basis


@pytest.fixture(scope="module")
def analysis(tmp_path_factory):
    grid_path, items_path = case.write_case(tmp_path_factory.mktemp("case"))
    rules = default_rules()
    grid = load_grid(str(grid_path), rules)
    return run_analysis(grid, rules, AnalysisOptions(slices=("full",), n_resamples=50, items_path=str(items_path)))


def test_a_lead_over_unread_replies_is_format_driven_and_the_content_reading_names_the_other_model(analysis):
    cells = analysis.degenerate_cells
    assert sorted(zip(cells["model"], cells["config_id"], strict=True)) == [(case.B, c) for c in sorted(case.FREE)]
    for cid in case.FREE:
        said = analysis.rests_on(cid, case.A, case.B)
        assert said.basis == readings.FORMAT
        assert said.why == (
            f"{case.B} parse_rate 0.50 < 0.95; on the 20 items both read {case.B} is ahead 0.800 vs 0.500 "
            f"(exact p = 0.0312), not {case.A}"
        )
        assert said.clause() == f" [format-driven: {said.why}]"
        assert said.content == f"on the 20 items both read {case.B} is ahead 0.800 vs 0.500 (exact p = 0.0312)"
    for cid in case.LOGPROB:
        said = analysis.rests_on(cid, case.B, case.A)
        assert (said.basis, said.clause(), said.cell()) == (readings.READABLE, "", "readable")


def test_a_lead_on_readable_cells_that_the_items_both_read_contradict_is_format_driven():
    """Both parse rates at 0.95 or above, so no cell is degenerate; A's strict lead of one item comes from
    B's one unread reply, and on the items both read they tie."""
    rows = []
    for model in ("a", "b"):
        for k in range(20):
            read = not (model == "b" and k == 0)
            rows.append(
                {
                    "model": model,
                    "config_id": "xstest/T1/greedy/0shot/free_form",
                    "item_id": str(k),
                    "seed": 0,
                    "parsed": read,
                    "item_score": float(read and k < 10),
                }
            )
    content = readings.content_table(pd.DataFrame(rows))
    said = readings.rests_on("xstest/T1/greedy/0shot/free_form", "a", "b", {}, readings.content_index(content))
    assert said.basis == readings.FORMAT
    assert said.why == "on the 19 items both read they tie (0.474 each), not a"


def test_a_constant_answer_makes_a_lead_uninformative_and_format_wins_over_it():
    bases = {
        ("a", "c1"): readings.CellBasis(readings.UNINFORMATIVE, 1.0, "constant answer: label 0 on 100% of 20"),
        ("b", "c2"): readings.CellBasis(readings.FORMAT, 0.1, "parse_rate 0.10 < 0.95"),
        ("a", "c2"): readings.CellBasis(readings.UNINFORMATIVE, 1.0, "constant answer: label 0 on 100% of 20"),
    }
    one = readings.rests_on("c1", "b", "a", bases)
    assert (one.basis, one.why) == (readings.UNINFORMATIVE, "a constant answer: label 0 on 100% of 20")
    two = readings.rests_on("c2", "a", "b", bases)
    assert two.basis == readings.FORMAT
    assert two.why == "a constant answer: label 0 on 100% of 20; b parse_rate 0.10 < 0.95"
