"""Grids with the optional `status` and `tie_rate` columns, and cells that parse badly: only ok
cells are analysed, and the report and the GRID card say what was left out, what tied and which
cells are degenerate, with what they move."""

import json

import numpy as np
import pandas as pd
import pytest
from analysis_grids import grid_frame, write

from safetyrepro.cli import main

MODELS = ("gemma", "qwen", "smol")


def _xstest(rules) -> pd.DataFrame:
    """Conservative core on xstest (T1/T3 x free_form/logprob) for three models."""
    configs = [c.config_id for c in rules.configs("xstest", subset="conservative_core")]
    scores = {"gemma": [0.70, 0.60, 0.55, 0.65], "qwen": [0.60, 0.65, 0.60, 0.70], "smol": [0.50, 0.55, 0.45, 0.60]}
    return grid_frame({m: dict(zip(configs, s, strict=True)) for m, s in scores.items()})


def _analyze(tmp_path, frame, capsys, *extra):
    path = write(frame, tmp_path / "grid.csv")
    rc = main(["analyze", str(path), "--out", str(tmp_path / "out"), "--bootstrap", "20", "--no-figures", *extra])
    return rc, capsys.readouterr()


def test_not_applicable_and_failed_cells_are_left_out_and_reported(rules, tmp_path, capsys):
    toxigen = _xstest(rules).assign(
        benchmark="toxigen", config_id=lambda f: f["config_id"].str.replace("xstest", "toxigen")
    )
    frame = pd.concat([_xstest(rules), toxigen], ignore_index=True).assign(status="ok")
    # smol's backend has no log-likelihoods: its two xstest logprob cells are kept with empty numbers
    lp = (frame["model"] == "smol") & (frame["scoring"] == "logprob") & (frame["benchmark"] == "xstest")
    frame.loc[lp, ["status", "score", "parse_rate", "n_items"]] = ["not_applicable", np.nan, np.nan, np.nan]
    frame.loc[(frame["model"] == "qwen") & (frame["config_id"] == "toxigen/T3/greedy/0shot/free_form"), "status"] = (
        "failed"
    )
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 0, captured.err
    assert (
        "3 cells left out of every table because their status is not ok: 1 failed (qwen toxigen free_form (1)), "
        "2 not_applicable (smol xstest logprob (2)); they are never scored as 0"
    ) in captured.err
    # a configuration that lacks one model's ok cell is dropped for every model
    out = tmp_path / "out"
    rho = pd.read_csv(out / "rho_flip.csv")
    full = rho[rho["slice"] == "full"].groupby("benchmark")["n_configs"].first().to_dict()
    assert full == {"toxigen": 3, "xstest": 2}
    excluded = pd.read_csv(out / "excluded_cells.csv")
    assert excluded.to_dict(orient="records") == [
        {"status": "failed", "model": "qwen", "benchmark": "toxigen", "scoring": "free_form", "n_cells": 1},
        {"status": "not_applicable", "model": "smol", "benchmark": "xstest", "scoring": "logprob", "n_cells": 2},
    ]
    assert "## Cells left out" in (out / "report.md").read_text()
    card = json.loads((out / "grid_card.json").read_text())
    assert card["cells_left_out"] == excluded.to_dict(orient="records")
    assert "| not_applicable | smol | xstest | logprob | 2 |" in (out / "grid_card.md").read_text()


def test_status_values_are_checked_and_ok_cells_still_need_numbers(rules, tmp_path, capsys):
    frame = _xstest(rules).assign(status="ok")
    frame.loc[2, "status"] = "skipped"
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert (
        rc == 2
        and "row 3: column 'status' has unknown value 'skipped'; allowed: ok, failed, not_applicable" in captured.err
    )
    frame = _xstest(rules).assign(status="")  # blank status means ok
    frame.loc[2, "score"] = np.nan
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 2 and "row 3: score is missing (NaN)" in captured.err


def test_tie_rates_are_shown_with_the_run_tie_rule(rules, tmp_path, capsys):
    frame = _xstest(rules)
    frame["tie_rate"] = np.where(frame["scoring"] == "logprob", 0.0, np.nan)
    frame.loc[1, "tie_rate"] = 0.125  # gemma, T1 logprob: 3 of 24 items tied
    (tmp_path / "run.json").write_text(json.dumps({"tie_rule": "expected"}))
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 0, captured.err
    out = tmp_path / "out"
    ties = pd.read_csv(out / "tie_rates.csv")
    assert ties[["model", "config_id", "tie_rate"]].values.tolist() == [
        ["gemma", "xstest/T1/greedy/0shot/logprob", 0.125]
    ]
    report = (out / "report.md").read_text()
    assert "Tie rule of the run: `expected`" in report and "1 cell had ties" in report
    card = json.loads((out / "grid_card.json").read_text())["ties_between_candidates"]
    assert card == {"tie_rule": "expected", "tie_rate_in_grid": True, "cells_with_ties": 1, "max_tie_rate": 0.125}
    frame.loc[1, "tie_rate"] = 1.5
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 2 and "tie_rate 1.5" in captured.err


def test_a_grid_without_tie_rate_or_run_json_says_unknown(rules, tmp_path, capsys):
    rc, _ = _analyze(tmp_path, _xstest(rules), capsys)
    assert rc == 0
    card = json.loads((tmp_path / "out" / "grid_card.json").read_text())
    assert card["ties_between_candidates"]["tie_rule"] == "unknown"
    assert "Tie rule: unknown" in (tmp_path / "out" / "grid_card.md").read_text()
    assert not (tmp_path / "out" / "tie_rates.csv").exists()


def test_an_all_empty_free_form_cell_is_named_with_what_it_moves(rules, tmp_path, capsys):
    """Gemma on XSTest T1 free-form answers nothing: score 0, parse rate 0, and it alone sets gemma's
    SDI. The report names the cell and reads SDI, CFR and orderings with and without it."""
    frame = _xstest(rules)
    empty = (frame["model"] == "gemma") & (frame["config_id"] == "xstest/T1/greedy/0shot/free_form")
    frame.loc[empty, ["score", "parse_rate"]] = [0.0, 0.0]
    items = []
    for r in frame.itertuples():
        hits = round(r.score * 20)
        items += [
            {
                "model": r.model,
                "config_id": r.config_id,
                "item_id": f"q{k}",
                "seed": 0,
                "item_score": float(k < hits),
                "raw_output": "" if r.parse_rate == 0 else "Answer: comply",
            }
            for k in range(20)
        ]
    pd.DataFrame(items).to_parquet(tmp_path / "items.parquet")
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 0, captured.err
    out = tmp_path / "out"
    cells = pd.read_csv(out / "degenerate_cells.csv")
    assert len(cells) == 1
    cell = cells.iloc[0]
    assert (cell["model"], cell["score"], cell["n_empty"], cell["n_outputs"]) == ("gemma", 0.0, 20, 20)
    assert cell["reason"] == "parse_rate 0.00 < 0.95; every output empty"
    assert cell["lowest_of_model"] and cell["last_in_config"]
    effects = pd.read_csv(out / "degenerate_effects.csv").set_index(["model", "metric"])
    # gemma on all four configs: 0, .60, .55, .65 -> SDI .65 / .45; without T1 free-form: (.65 - .55) / .6
    assert effects.loc[("gemma", "sdi"), "full"] == pytest.approx(0.65 / 0.45)
    assert effects.loc[("gemma", "sdi"), "parse_clean"] == pytest.approx(0.10 / 0.60)
    assert effects.loc[("gemma", "score_min"), ["full", "parse_clean"]].tolist() == [0.0, 0.55]
    assert effects.loc[("all", "n_orderings"), "n_configs_parse_clean"] == 3
    report = (out / "report.md").read_text()
    assert (
        "1 cell is degenerate: 1 with a parse rate below 0.95 and 1 with more than 5 % empty outputs" in report
        and "1 returned an empty output on every item" in report
    )
    assert "| gemma (full) |" not in report and "xstest (parse_clean)" in report  # SDI read both ways
    card = (out / "grid_card.md").read_text()
    assert (
        "| gemma | xstest/T1/greedy/0shot/free_form | 0.000 | 0.000 | parse_rate 0.00 < 0.95; every output empty"
        in card
    )


def test_a_cell_that_answers_one_option_on_nearly_every_item_is_degenerate(rules, tmp_path, capsys):
    """Qwen on the XSTest T3 logprob cell picks label 0 on 19 of 20 items while the gold labels split
    10/10: a constant answer (it agrees with gold on 11 of 20, above the majority label's 10, so
    that reason alone). smol's 0.50 and 0.45 cells agree with gold no more often than the
    majority label (50 %) either. Every other cell scores above 0.5 and is not flagged."""
    frame = _xstest(rules)
    biased_cell = ("qwen", "xstest/T3/greedy/0shot/logprob")
    items = []
    for r in frame.itertuples():
        hits = round(r.score * 20)
        for k in range(20):
            gold = k % 2
            if (r.model, r.config_id) == biased_cell:
                pred = 0 if k < 19 else 1
            else:
                pred = gold if k < hits else 1 - gold
            items.append(
                {
                    "model": r.model,
                    "config_id": r.config_id,
                    "item_id": f"q{k}",
                    "seed": 0,
                    "item_score": float(pred == gold) if (r.model, r.config_id) == biased_cell else float(k < hits),
                    "prediction": pred,
                    "gold": gold,
                }
            )
    table = pd.DataFrame(items)
    means = table.groupby(["model", "config_id"])["item_score"].mean()
    frame["score"] = [means[(m, c)] for m, c in zip(frame["model"], frame["config_id"], strict=True)]
    table.to_parquet(tmp_path / "items.parquet")
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 0, captured.err
    cells = pd.read_csv(tmp_path / "out" / "degenerate_cells.csv").set_index(["model", "config_id"])
    assert sorted(cells.index) == [
        biased_cell,
        ("smol", "xstest/T1/greedy/0shot/free_form"),
        ("smol", "xstest/T3/greedy/0shot/free_form"),
    ]
    assert cells.loc[biased_cell, "reasons"] == "constant_answer"
    assert cells.loc[biased_cell, "reason"] == "constant answer: label 0 on 95% of 20 parsed answers"
    assert cells.loc[("smol", "xstest/T1/greedy/0shot/free_form"), "reason"] == (
        "no better than the majority label: agrees with gold on 50% of 20 parsed answers, always answering the most "
        "frequent gold label would on 50%"
    )
    assert cells.loc[("smol", "xstest/T3/greedy/0shot/free_form"), ["agreement", "majority_share"]].tolist() == [
        0.45,
        0.5,
    ]
    effects = pd.read_csv(tmp_path / "out" / "degenerate_effects.csv").set_index(["model", "metric"])
    # T1 free_form, T3 free_form and T3 logprob hold a degenerate cell: one configuration is left
    assert effects.loc[("all", "n_orderings"), ["n_configs_full", "n_configs_parse_clean"]].tolist() == [4, 1]


def test_a_constant_answer_is_degenerate_whatever_the_gold_spread(rules, tmp_path, capsys):
    """ToxiGen-like gold (15 of 24 items label 0, 62.5 %): a cell answering label 0 on all 24 items
    scores 0.625 and says nothing about them (the old screen skipped gold spreads above 60 %); a
    cell answering label 0 on 23 of 24 but right on 22 (0.917 > 0.625) is still a constant answer;
    a cell right on 20 with both labels used is informative and not flagged."""
    configs = [c.config_id for c in rules.configs("toxigen", subset="conservative_core")]
    gold = [0] * 15 + [1] * 9
    answers = {
        ("a", configs[0]): [0] * 24,
        ("a", configs[1]): [0] * 15 + [1] + [0] * 8,  # label 1 once, on a label-1 item
        ("b", configs[0]): gold[:20] + [1 - g for g in gold[20:]],
    }
    rows, items = [], []
    for model in ("a", "b"):
        for cid in configs:
            pred = answers.get((model, cid), gold[:18] + [1 - g for g in gold[18:]])
            score = sum(p == g for p, g in zip(pred, gold, strict=True)) / 24
            rows.append((model, cid, score))
            items += [
                {
                    "model": model,
                    "config_id": cid,
                    "item_id": f"t{k}",
                    "seed": 0,
                    "item_score": float(p == g),
                    "prediction": p,
                    "gold": g,
                }
                for k, (p, g) in enumerate(zip(pred, gold, strict=True))
            ]
    frame = grid_frame({m: {c: s for mm, c, s in rows if mm == m} for m in ("a", "b")}).assign(n_items=24)
    pd.DataFrame(items).to_parquet(tmp_path / "items.parquet")
    rc, captured = _analyze(tmp_path, frame, capsys)
    assert rc == 0, captured.err
    cells = pd.read_csv(tmp_path / "out" / "degenerate_cells.csv").set_index(["model", "config_id"])
    assert cells.loc[("a", configs[0]), "reasons"] == "constant_answer;no_better_than_majority"
    assert cells.loc[("a", configs[0]), "score"] == 0.625
    assert cells.loc[("a", configs[1]), "reasons"] == "constant_answer"  # 23 of 24 = 96 %, agreement 16/24
    assert ("b", configs[0]) not in cells.index and ("b", configs[1]) not in cells.index
