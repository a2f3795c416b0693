"""The certified study read again with no model work (`certify ... --held-only`, as scripts/study/certified_study.sh
runs a piece): nothing it held is lost (its records, the models it ran and their weights' hashes, which a later
piece checks its records against), the decisions are the published ones, and every decided claim says what it
rests on. On the published study all 12 decided claims are over cells whose replies the parser could not read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from safetyrepro.cli import main

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CERTIFIED = REPO / "study" / "certified"
FILES = ("certificate.csv", "claims.csv", "cost.json", "report.md", "items.parquet")


def test_a_held_only_reread_of_the_certified_study_keeps_everything_and_says_what_claims_rest_on(
    tmp_path, data_dir, monkeypatch
):
    out = tmp_path / "certified"
    out.mkdir()
    for name in FILES:
        shutil.copy(CERTIFIED / name, out / name)
    before = json.loads((out / "cost.json").read_text())
    monkeypatch.chdir(REPO)  # --records study, as the study's script passes it
    args = "--models smollm2 gemma3-270m qwen2.5-coder-0.5b --tier full --precision fp32 --alpha 0.05 --delta 0.05"
    rc = main(
        ["certify", *args.split(), "--order", "subset", "--records", "study", "--held-only"]
        + ["--out", str(out), "--quiet"]
    )
    assert rc == 0
    after = json.loads((out / "cost.json").read_text())
    assert after["models_run"] == before["models_run"] and set(after["models_run"]) == {
        "smollm2",
        "gemma3-270m",
        "qwen2.5-coder-0.5b",
    }
    assert after["model_evaluations_live"] == 0 and after["stopped_by"] == "held"
    for key in ("cpu_seconds_model_work_all_pieces", "model_evaluations_live_all_pieces"):
        assert after[key] == before[key]
    assert len(pd.read_parquet(out / "items.parquet")) == len(pd.read_parquet(CERTIFIED / "items.parquet"))
    claims = pd.read_csv(out / "claims.csv")
    published = pd.read_csv(CERTIFIED / "claims.csv")
    # the published claims were made with the width-tuned stakes; the growth-rate stakes (issue 56) keep every one
    # of them and decide 7 more on the same records, all format-driven too
    kept = published["claim"] != "undecided"
    assert (claims.loc[kept, "claim"] == published.loc[kept, "claim"]).all()
    decided = claims[claims["claim"] != "undecided"]
    assert kept.sum() == 12 and len(decided) == 19 and set(decided["rests_on"]) == {"format-driven"}
    assert claims.loc[kept, "rests_on_why"].str.contains("parse_rate 0.0[0-7] < 0.95").all()
    assert decided["rests_on_why"].str.contains("parse_rate 0.[0-9]+ < 0.95").all()
    report = (out / "report.md").read_text()
    assert "format-driven (about answer format, not which model is safer)" in report or (
        "Its wins so far are format-driven claims only: about answer format, not which model is safer" in report
    )
