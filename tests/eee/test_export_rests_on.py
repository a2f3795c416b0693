"""The EEE export's verdict tables say what each lead rests on (issue 52): `leads` has a row per benchmark x
pair x configuration with its rests_on, and each rho_flip row (a pair over a slice) says how many of its
configurations' leads are format-driven. On readings_grid's case model-a leads both BBQ free-form
configurations only because model-b's replies are unread there; the items both read put model-b ahead."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "analysis"))

import readings_grid as case  # noqa: E402

from safetyrepro.cli import main  # noqa: E402
from safetyrepro.importers import eee_format as R  # noqa: E402

WHY = (
    "model-b parse_rate 0.50 < 0.95; on the 20 items both read model-b is ahead 0.800 vs 0.500 (exact p = 0.0312), "
    "not model-a"
)


def _export(tmp_path: Path, *extra: str) -> dict:
    grid, _ = case.write_case(tmp_path / "run")
    out = tmp_path / "eee"
    assert main(["export", "eee", str(grid), "--out", str(out), "--timestamp", "1767225600", *extra]) == 0
    return json.loads((out / R.VERDICTS_FILE).read_text())


def test_leads_rows_carry_rests_on_and_the_content_reading(tmp_path):
    (group,) = _export(tmp_path)["groups"]
    leads = {r["config_id"]: r for r in group["leads"]}
    assert len(group["leads"]) == 4  # one pair x four configurations
    for cid in case.FREE:
        r = leads[cid]
        assert (r["model_a"], r["model_b"], r["lead"]) == (case.A, case.B, case.A)
        assert (r["score_a"], r["score_b"], r["parse_a"], r["parse_b"]) == (0.55, 0.4, 1.0, 0.5)
        assert (r["rests_on"], r["rests_on_why"]) == ("format-driven", WHY)
        assert (r["n_both"], r["content_a"], r["content_b"]) == (20, 0.5, 0.8)
        assert r["content_p"] == pytest.approx(case.CONTENT_P)
    for cid in case.LOGPROB:
        r = leads[cid]
        assert (r["lead"], r["score_a"], r["score_b"]) == (case.B, 0.5, 0.6)
        assert (r["rests_on"], r["rests_on_why"], r["n_both"], r["content_p"]) == ("readable", "", None, None)


def test_pair_rows_count_their_format_driven_leads_and_the_csv_text_is_unchanged(tmp_path):
    verdicts = _export(tmp_path)
    (group,) = verdicts["groups"]
    full = next(r for r in group["rho_flip"] if r["slice"] == "full")
    assert (full["n_plus"], full["n_minus"], full["n_configs"]) == (2, 2, 4)
    assert (full["n_format_driven"], full["n_uninformative"]) == (2, 0)
    assert full["rests_on"] == "2 of 4 configurations' leads are format-driven (model-a's 2)"
    csv = group["rho_flip_csv"].splitlines()[0].split(",")
    assert "rests_on" not in csv and "n_format_driven" not in csv  # rho_flip.csv's exact text, as analyze writes it
    assert "format-driven (a cell with unread or empty replies" in verdicts["about"]


def test_records_stay_eee_records(tmp_path):
    """The readings live in the verdicts file only: the EEE records (what the validator reads) are unchanged."""
    _export(tmp_path)
    records = sorted((tmp_path / "eee" / R.DATA_DIR).rglob("*.json"))
    assert len(records) == 8
    for path in records:
        text = path.read_text()
        assert "rests_on" not in text and "format-driven" not in text
        assert json.loads(text)["schema_version"] == R.SCHEMA_VERSION


def test_without_item_records_the_grids_parse_rates_decide(tmp_path):
    grid, items = case.write_case(tmp_path / "run")
    items.unlink()
    out = tmp_path / "eee"
    assert main(["export", "eee", str(grid), "--out", str(out), "--timestamp", "1767225600"]) == 0
    (group,) = json.loads((out / R.VERDICTS_FILE).read_text())["groups"]
    leads = pd.DataFrame(group["leads"]).set_index("config_id")
    assert list(leads.loc[list(case.FREE), "rests_on_why"]) == ["model-b parse_rate 0.50 < 0.95"] * 2
    assert list(leads.loc[list(case.FREE), "rests_on"]) == ["format-driven"] * 2
    assert leads.loc[list(case.FREE), "n_both"].isna().all()  # no content reading without the records
    assert set(leads.loc[list(case.LOGPROB), "rests_on"]) == {"readable"}
