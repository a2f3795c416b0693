"""What certify's claims and verdicts rest on (issue 52): claims.csv's rests_on, the verdict's words, and the
content reading as a target (`--reading content`), on the issue's synthetic case (tests/analysis/readings_grid.py:
A leads the strict score on BBQ's two free-form configurations only because B's replies are unread there; on the
20 items both read B is ahead 0.800 vs 0.500; B leads both log-probability configurations).

The replays use `--target subset`, under which 40 items decide: once every item of a configuration is in, its
difference is known exactly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
import readings_grid as case  # noqa: E402

from safetyrepro.analysis.metrics.degenerate import degenerate_cells, screen_records  # noqa: E402
from safetyrepro.analysis.paired.significance import load_items  # noqa: E402
from safetyrepro.certify.algorithm import ClaimRow  # noqa: E402
from safetyrepro.certify.rests_on import UNKNOWN, claim_basis  # noqa: E402
from safetyrepro.cli import main  # noqa: E402
from safetyrepro.grid.grid_io import load_grid  # noqa: E402
from safetyrepro.tasks.envelope import default_rules  # noqa: E402

T1_FREE, T3_FREE = case.FREE
T1_LOGPROB, T3_LOGPROB = case.LOGPROB
B_UNREAD = "model-b parse_rate 0.50 < 0.95"
B_AHEAD = "on the 20 items both read model-b is ahead 0.800 vs 0.500 (exact p = 0.0312), not model-a"
FORMAT_WHY = f"parse rates model-a 1.00, model-b 0.50 on 40 items; {B_UNREAD}; {B_AHEAD}"
FORMAT_ONLY = "decided by format-driven claims only: about answer format, not which model is safer"


def _replay(tmp_path, capsys, *extra, only=None, items=None):
    grid_path, items_path = case.write_case(tmp_path / "case")
    if only is not None:  # a grid of some configurations only
        g = pd.read_csv(grid_path)
        g[g["config_id"].isin(only)].to_csv(grid_path, index=False)
    if items is not None:
        items(pd.read_parquet(items_path)).to_parquet(items_path)
    out = tmp_path / "out"
    rc = main(
        ["certify", "--replay", str(items_path), "--grid", str(grid_path), "--target", "subset", "--seed", "0"]
        + ["--out", str(out), "--quiet", *extra]
    )
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    claims = pd.read_csv(out / "claims.csv", keep_default_na=False).set_index("config_id")
    cert = pd.read_csv(out / "certificate.csv", keep_default_na=False).iloc[0]
    return out, claims, cert, printed.out


def test_free_form_claims_over_unread_replies_are_format_driven(tmp_path, capsys):
    out, claims, cert, printed = _replay(tmp_path, capsys)
    # the strict lead of A on T1 free-form: decided on all 40 items, format-driven, B's parse rate and who is
    # ahead on the items both read beside it
    row = claims.loc[T1_FREE]
    assert (row["claim"], row["estimate"], row["items_used"], row["reading"]) == ("a_better", 0.15, 40, "strict")
    assert (row["rests_on"], row["rests_on_why"]) == ("format-driven", FORMAT_WHY)
    # B's log-probability win is readable: both read every reply
    row = claims.loc[T1_LOGPROB]
    assert (row["claim"], row["items_used"]) == ("b_better", 32)
    assert (row["rests_on"], row["rests_on_why"]) == ("readable", "parse rates model-a 1.00, model-b 1.00 on 32 items")
    # every free-form claim is marked, decided or not (T3's stopped after 8 items, 4 of them B's unread)
    assert set(claims.loc[[T1_FREE, T3_FREE], "rests_on"]) == {"format-driven"}
    assert claims.loc[T3_FREE, "rests_on_why"].startswith("parse rates model-a 1.00, model-b 0.50 on 8 items; ")
    assert set(claims.loc[[T1_LOGPROB, T3_LOGPROB], "rests_on"]) == {"readable"}
    # the flip needs A's format-driven win: the verdict says so, in the certificate, the report and the printout
    assert (cert["verdict"], cert["rests_on"]) == ("flip", "format-driven")
    assert cert["rests_on_why"] == (
        f"1 of the 2 claims it rests on is not readable ({T1_FREE} format-driven); on its readable claims alone "
        "it would be undecided"
    )
    assert "bbq          model-a vs model-b: flip (88 of 160 paired evaluations; rests on: format-driven)" in printed
    report = (out / "report.md").read_text().splitlines()
    assert report[:2] == ["# Certified verdicts", ""]  # the verdict leads
    assert report[2].startswith("- bbq: the verdict flips. model-a is ahead of model-b with T1")
    assert report[2].endswith(
        f"It rests on format-driven claims: 1 of the 2 claims it rests on is not readable ({T1_FREE} "
        "format-driven); on its readable claims alone it would be undecided."
    )
    # the report's claims table: rests_on in each row, with why where it is not readable
    rows = [line for line in report if line.startswith("| subset | bbq |")]
    assert len(rows) == 2
    assert rows[0].startswith(f"| subset | bbq | model-a | model-b | {T1_FREE} | a_better |")
    assert rows[0].endswith(f"| strict | format-driven: {FORMAT_WHY} |")
    assert rows[1].startswith(f"| subset | bbq | model-a | model-b | {T1_LOGPROB} | b_better |")
    assert rows[1].endswith("| strict | readable |")
    assert json.loads((out / "cost.json").read_text())["reading"] == "strict"


def test_a_verdict_carried_only_by_format_driven_claims_says_so(tmp_path, capsys):
    out, claims, cert, printed = _replay(tmp_path, capsys, only=case.FREE)
    assert list(claims["claim"]) == ["a_better", "a_better"]
    assert list(claims["rests_on_why"]) == [FORMAT_WHY, FORMAT_WHY]
    assert (cert["verdict"], cert["rests_on"]) == ("stable_a", "format-driven")
    details = f"{T1_FREE}: {FORMAT_WHY}; {T3_FREE}: {FORMAT_WHY}"
    assert cert["rests_on_why"] == f"{FORMAT_ONLY} ({details})"
    report = (out / "report.md").read_text().splitlines()
    assert report[2] == (
        "- bbq: model-a is ahead of model-b wherever the envelope goes: ahead on 2 of 2 configurations, and on "
        "none is model-b ahead by 0.05 or more (80 of 80 paired evaluations, 100 %). It is "
        f"{FORMAT_ONLY} ({details})."
    )
    assert "model-a vs model-b: stable_a (80 of 80 paired evaluations; rests on: format-driven)" in printed


def test_the_content_reading_names_model_b(tmp_path, capsys):
    out, claims, cert, printed = _replay(tmp_path, capsys, "--reading", "content")
    assert set(claims["reading"]) == {"content"}
    for cid in case.FREE:
        row = claims.loc[cid]
        # 28 items drawn, 14 of them read by both: B right on 11, A on 6 of those. The estimate is the content
        # difference (6 - 11) / 14 scaled by the share both read, 14 / 28
        assert (row["claim"], row["items_used"], row["estimate"]) == ("b_better", 28, -0.178571428571)
        assert row["estimate"] == pytest.approx((6 / 14 - 11 / 14) * 14 / 28)
        assert (row["rests_on"], row["rests_on_why"]) == (
            "readable",
            "parse rates model-a 1.00, model-b 0.50 on 28 items; on the 14 items both read model-b is ahead 0.786 "
            "vs 0.429 (exact p = 0.0625); content reading: the estimate is the difference on the 14 items both "
            "read scaled by their share (0.50)",
        )
    # log-probability configurations read as under strict: the same claims and numbers
    assert list(claims.loc[list(case.LOGPROB), "claim"]) == ["b_better", "b_better"]
    assert (cert["verdict"], cert["reading"], cert["rests_on"]) == ("stable_b", "content", "readable")
    report = (out / "report.md").read_text()
    assert "- bbq: model-b is ahead of model-a wherever the envelope goes: ahead on 4 of 4 configurations" in report
    assert (
        "Reading: content. On a free-form configuration theta is the paired difference on the items where both"
        in report
    )
    assert "its size (estimate, bounds) is smaller by that share." in report
    assert json.loads((out / "cost.json").read_text())["reading"] == "content"


def test_the_strict_reading_keeps_the_claims_it_made(tmp_path, capsys):
    """`--reading strict` is the default, and the columns claims.csv had before stay as they were."""
    out, default, _, _ = _replay(tmp_path / "a", capsys)
    _, strict, _, _ = _replay(tmp_path / "b", capsys, "--reading", "strict")
    pd.testing.assert_frame_equal(default, strict)
    assert (out / "claims.csv").read_text().splitlines()[0].split(",") == [
        "target", "benchmark", "model_a", "model_b", "config_id", "claim", "lower", "upper", "estimate",
        "items_used", "n_full", "reading", "rests_on", "rests_on_why",
    ]  # fmt: skip
    assert list(default["claim"]) == ["a_better", "b_better", "undecided", "undecided"]


def test_records_without_read_flags_fall_back_on_the_grids_parse_rates(tmp_path, capsys):
    no_flags = lambda f: f.drop(columns=["parsed", "prediction"])  # noqa: E731
    _, claims, _, _ = _replay(tmp_path, capsys, items=no_flags)
    assert (claims.loc[T1_FREE, "rests_on"], claims.loc[T1_FREE, "rests_on_why"]) == (
        "format-driven",
        "parse rates model-a 1.00, model-b 0.50 (the grid's, whole cells: the records carry no read flags); "
        + B_UNREAD,
    )
    # without them, and without the grid's, a free-form claim's basis is unknown; a log-probability one's is not
    records = no_flags(case.item_records())
    claim = ClaimRow("bbq", "model-a", "model-b", T1_FREE, "a_better", 0.1, 0.2, 0.15, 40, 40)
    mine = records[records["config_id"] == T1_FREE]
    assert claim_basis(claim, mine).basis == UNKNOWN
    logprob = ClaimRow("bbq", "model-a", "model-b", T1_LOGPROB, "b_better", -0.2, -0.02, -0.1, 40, 40)
    assert claim_basis(logprob, records[records["config_id"] == T1_LOGPROB]).basis == "readable"


@pytest.mark.parametrize(
    "extra, items, words",
    [
        (["--reading", "content", "--control", "auto"], None, "--reading content certifies every configuration"),
        (
            ["--reading", "content"],
            lambda f: f.drop(columns=["parsed", "prediction"]),
            "has no parsed or prediction column",
        ),
    ],
)
def test_the_content_reading_refuses_what_it_cannot_read(tmp_path, capsys, extra, items, words):
    grid_path, items_path = case.write_case(tmp_path / "case")
    if items is not None:
        items(pd.read_parquet(items_path)).to_parquet(items_path)
    rc = main(["certify", "--replay", str(items_path), "--grid", str(grid_path), "--out", str(tmp_path / "o"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1


def test_the_record_screen_is_analyzes_screen(tmp_path):
    """degenerate.screen_records, from item records alone, flags the cells degenerate_cells flags from the grid,
    for the same reasons in the same words."""
    grid_path, items_path = case.write_case(tmp_path)
    grid = load_grid(str(grid_path), default_rules())
    items = load_items(str(items_path), grid)
    full = degenerate_cells(grid, items.empty_outputs, items.option_bias)
    mine = screen_records(pd.read_parquet(items_path))
    columns = ["model", "config_id", "parse_rate", "reasons", "reason"]
    pd.testing.assert_frame_equal(mine[columns], full[columns])
    assert list(mine["reason"]) == ["parse_rate 0.50 < 0.95", "parse_rate 0.50 < 0.95"]
    assert list(mine["config_id"]) == list(case.FREE)


def _claim(cid, claim):
    return ClaimRow("bbq", "model-a", "model-b", cid, claim, 0.0, 0.0, 0.0, 40, 40)


@pytest.mark.parametrize(
    "verdict, claims, bases, expected",
    [
        # a flip whose readable claims alone flip: readable, the others named
        (
            "flip",
            [(T1_FREE, "a_better"), (T1_LOGPROB, "b_better"), (T3_LOGPROB, "a_better")],
            ["format-driven", "readable", "readable"],
            ("readable", f"its readable claims alone decide it; 1 other claim(s) are not readable ({T1_FREE})"),
        ),
        # no deciding claim readable, of two bases: it says so, naming each
        (
            "stable_a",
            [(T1_FREE, "a_better"), (T1_LOGPROB, "a_better")],
            ["format-driven", "uninformative"],
            (
                "format-driven",
                "decided by claims that are not readable only: about answer format or answers that say nothing "
                f"about the items, not which model is safer ({T1_FREE} format-driven, {T1_LOGPROB} uninformative)",
            ),
        ),
        # an open pair whose only win so far is uninformative
        (
            "undecided",
            [(T1_FREE, "undecided"), (T1_LOGPROB, "b_better")],
            ["readable", "uninformative"],
            (
                "uninformative",
                "its wins so far are uninformative claims only: cells that answer one label or no better than the "
                f"gold labels' frequencies ({T1_LOGPROB}: why)",
            ),
        ),
        ("undecided", [(T1_FREE, "undecided")], ["format-driven"], ("", "no configuration decided")),
    ],
)
def test_a_pair_verdict_rests_on_its_deciding_claims(verdict, claims, bases, expected):
    from safetyrepro.certify.algorithm import PairRow
    from safetyrepro.certify.rests_on import Basis, pair_basis

    rows = [_claim(cid, claim) for cid, claim in claims]
    deciding = tuple(c.config_id for c in rows if verdict != "undecided" or c.claim != "undecided")
    if verdict == "flip":
        deciding = tuple(c.config_id for c in rows if c.claim != "undecided")
    pair = PairRow("bbq", "model-a", "model-b", verdict, 120, 160, deciding, 0)
    got = pair_basis(pair, rows, [Basis(b, "why") for b in bases])
    assert (got.basis, got.why) == expected
