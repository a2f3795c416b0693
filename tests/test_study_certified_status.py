"""scripts/study/certified_status.py: the certified study's README status, from hand-made files whose every
number is known, and the published README agrees with the published files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cs():
    spec = importlib.util.spec_from_file_location(
        "certified_status", ROOT / "scripts" / "study" / "certified_status.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _study(tmp_path: Path):
    first, cert = tmp_path / "first", tmp_path / "certified"
    (first / "analysis").mkdir(parents=True)
    cert.mkdir()
    grid = []
    # 24-item scores: on c1 a leads by 0.25, on c2 a leads by 0.125, on c3 they tie
    for cfg, a, b in [("bbq/c1", 0.75, 0.5), ("bbq/c2", 0.5, 0.375), ("bbq/c3", 0.5, 0.5)]:
        grid += [
            {"model": "a", "benchmark": "bbq", "config_id": cfg, "score": a, "status": "ok"},
            {"model": "b", "benchmark": "bbq", "config_id": cfg, "score": b, "status": "ok"},
        ]
    pd.DataFrame(grid).to_csv(first / "grid.csv", index=False)
    pd.DataFrame(
        [{"benchmark": "bbq", "slice": "full", "model_a": "a", "model_b": "b", "n_plus": 2, "n_minus": 0}]
    ).to_csv(first / "analysis" / "rho_flip.csv", index=False)
    claims = [("bbq/c1", "a_better", 0.1, 0.4), ("bbq/c2", "b_better", -0.3, -0.02), ("bbq/c3", "undecided", -0.5, 0.5)]
    pd.DataFrame(
        [
            {
                "benchmark": "bbq",
                "model_a": "a",
                "model_b": "b",
                "config_id": c,
                "claim": k,
                "lower": lo,
                "upper": hi,
                "estimate": 0.0,
                "items_used": 120,
                "n_full": 300,
            }
            for c, k, lo, hi in claims
        ]
    ).to_csv(cert / "claims.csv", index=False)
    pd.DataFrame(
        [
            {
                "benchmark": "bbq",
                "model_a": "a",
                "model_b": "b",
                "verdict": "flip",
                "n_evaluations": 360,
                "n_full": 900,
                "deciding_configs": "bbq/c1;bbq/c2",
                "n_open": 1,
            }
        ]
    ).to_csv(cert / "certificate.csv", index=False)
    (cert / "cost.json").write_text(
        json.dumps(
            {
                "paired_evaluations": 360,
                "full_paired_evaluations": 900,
                "share_of_full_paired": 0.4,
                "model_evaluations_live": 48,
                "seconds_model_work": 7200.0,
                "measured_seconds_full_grid": 36000.0,
                "stopped_by": "budget",
            }
        )
    )
    (cert / "README.md").write_text("# x\n\n<!-- status -->\nold\n<!-- /status -->\n\nkept\n")
    return first, cert


def test_each_decided_claim_is_set_against_the_24_item_reading(cs, tmp_path):
    first, cert = _study(tmp_path)
    assert cs.main(["--dir", str(cert), "--first", str(first)]) == 0
    text = (cert / "README.md").read_text()
    assert text.startswith("# x\n\n<!-- status -->\n**Status:** 1 benchmark x pair verdicts: 1 flip.")
    assert "old" not in text and text.endswith("<!-- /status -->\n\nkept\n")
    assert "2 of 3 pair x configuration claims decided (1 a_better, 1 b_better)" in text
    assert "Spent 360 of the full grid's 900 paired evaluations (40%" in text and "2.0 h of model work" in text
    assert "about 10 h of model time" in text and "Stopped by: budget." in text
    assert "Of the 2 decided claims, 1 confirmed, 1 overturned." in text
    assert "| bbq | a | b | bbq/c1 | a_better | +0.100 | +0.400 | 120 | +0.250 | confirmed |" in text
    assert "| bbq | a | b | bbq/c2 | b_better | -0.300 | -0.020 | 120 | +0.125 | overturned |" in text
    # the 24-item study read a stable win for a (2 wins, none for b); the certified flip overturns it
    assert "bbq a vs b: 24 items read stable_a, certified flip (overturned)" in text
    # no rates measured in this cost.json: the pair's hours cannot be said, its evaluations can
    assert "| bbq | a | b | flip | 360 | 900 | nan | nan | 2 of 3 |" in text


def test_each_pair_says_the_model_hours_its_items_cost_against_the_full_grids(cs, tmp_path):
    first, cert = _study(tmp_path)
    cost = json.loads((cert / "cost.json").read_text())
    # a at 2 s and b at 1 s per item on c1 (3 s per paired item), the benchmark's mean 0.5 s elsewhere (1 s)
    cost["seconds_per_model_evaluation_by_cell"] = {"a|bbq/c1": 2.0, "b|bbq/c1": 1.0}
    cost["seconds_per_model_evaluation"] = {"bbq": 0.5}
    (cert / "cost.json").write_text(json.dumps(cost))
    assert cs.main(["--dir", str(cert), "--first", str(first)]) == 0
    # used: 120 items x (3 + 1 + 1) s = 600 s = 0.17 h; full: 300 x 5 s = 1500 s = 0.4 h (one decimal)
    assert "| bbq | a | b | flip | 360 | 900 | 0.17 | 0.4 | 2 of 3 |" in (cert / "README.md").read_text()


def test_claim_words(cs):
    assert cs.compare_claim("a_better", 0.0) == "tie at 24"
    assert cs.compare_claim("b_better", -0.1) == "confirmed"
    assert cs.compare_claim("within_delta", 0.0) == "tie at 24"
    assert cs.compare_claim("within_delta", 0.2) == "a difference at 24, within delta on 300"
    assert cs.compare_claim("a_better", float("nan")) == "not read"


def test_the_published_readme_says_what_the_published_files_say(cs, tmp_path):
    d = ROOT / "study" / "certified"
    block = cs.status_block(d, ROOT / "study" / "grid.csv", ROOT / "study" / "analysis" / "rho_flip.csv")
    assert block in (d / "README.md").read_text()


def test_a_readme_without_the_block_is_refused(cs, tmp_path):
    first, cert = _study(tmp_path)
    (cert / "README.md").write_text("# no block\n")
    with pytest.raises(SystemExit, match="no <!-- status -->"):
        cs.main(["--dir", str(cert), "--first", str(first)])
    assert (cert / "README.md").read_text() == "# no block\n"


def test_the_readmes_lead_matches_both_readings():
    """The lead's numbers, from the files: the population reading (beside the README) and the subset one
    (subset/): 15 undecided, the claims certified (10 of 612 before flip hunting, more as the study goes on)
    said in the lead, each a win over a cell whose replies the parser could not read (parse rate <= 0.08 in the
    first study's degenerate_cells.csv); the subset reading's 11 include 10 of them, and the other one is BBQ's T2
    3-shot log-probability win on all 300 items."""
    folder = ROOT / "study" / "certified"
    lead = (folder / "README.md").read_text().split("<!-- status -->")[0]
    cert, claims = pd.read_csv(folder / "certificate.csv"), pd.read_csv(folder / "claims.csv")
    sub = pd.read_csv(folder / "subset" / "claims.csv")
    assert set(cert["target"]) == {"population"} and set(claims["target"]) == {"population"}
    decided, sub_decided = claims[claims["claim"] != "undecided"], sub[sub["claim"] != "undecided"]
    assert (cert["verdict"] == "undecided").sum() == len(cert) == 15 and "all 15 are `undecided`" in lead
    assert len(decided) >= 10 and len(claims) == 612 and f"{len(decided)} of the 612 configuration claims" in lead
    assert len(sub_decided) == 11 and "certify 11 claims" in lead
    degenerate = pd.read_csv(ROOT / "study" / "analysis" / "degenerate_cells.csv")
    parse = dict(zip(zip(degenerate["model"], degenerate["config_id"]), degenerate["parse_rate"], strict=True))
    for r in decided.itertuples():
        loser = r.model_b if r.claim == "a_better" else r.model_a
        assert parse[(loser, r.config_id)] <= 0.08, (loser, r.config_id)
    key = ["benchmark", "model_a", "model_b", "config_id", "claim"]
    both = decided[key].merge(sub_decided[key])
    assert len(both) == 10 and "10 of them hold about the models too" in lead
    lost = sub_decided.merge(decided[key], how="left", indicator=True).query("_merge == 'left_only'")
    assert list(lost["config_id"]) == ["bbq/T2/greedy/3shot/logprob"]
