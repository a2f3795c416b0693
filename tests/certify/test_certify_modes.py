"""`certify live` and `certify replay` each take only their own flags (issue 55): replay's --help lists at most 20
options, neither lists the comparison-only ones, and the former spellings (`certify --replay ITEMS ...`, `certify
--models ...`) parse to the same arguments as the new ones."""

from __future__ import annotations

import re

import pytest

from safetyrepro.cli import build_parser, main, with_current_spelling


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def _options(text: str) -> set[str]:
    return set(re.findall(r"^  (--[\w-]+|-h)", text, re.M))


def test_replay_lists_at_most_20_options_and_neither_mode_lists_the_comparison_ones(capsys):
    replay = _options(_help(capsys, "certify", "replay"))
    assert len(replay) <= 20 and {"--grid", "--target", "--reading", "--budget", "--out"} <= replay
    live = _options(_help(capsys, "certify", "live"))
    assert {"--models", "--records", "--held-only", "--selection", "--order"} <= live
    assert not ({"--records", "--held-only", "--selection", "--order", "--models"} & replay)
    assert "--reading" not in live  # a live run certifies the strict reading
    assert not ({"--allocation", "--familywise"} & (replay | live))


@pytest.mark.parametrize(
    "former, current",
    [
        (
            ["certify", "--replay", "i.parquet", "--grid", "g.csv", "--out", "o", "--target", "subset"],
            ["certify", "replay", "i.parquet", "--grid", "g.csv", "--out", "o", "--target", "subset"],
        ),
        (
            ["--data-dir", "d", "certify", "--out", "o", "--models", "a", "b", "--control", "auto"],
            ["--data-dir", "d", "certify", "live", "--out", "o", "--models", "a", "b", "--control", "auto"],
        ),
    ],
)
def test_the_former_spellings_parse_as_the_new_ones(former, current):
    assert with_current_spelling(former) == with_current_spelling(current)
    parse = build_parser().parse_args
    assert vars(parse(with_current_spelling(former))) == vars(parse(current))
