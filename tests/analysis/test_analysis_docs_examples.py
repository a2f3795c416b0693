"""docs/analysis.md quotes what commands print: every fenced block that starts with `$ safetyrepro ...` is
run here (from the repository root, in-process, `| head -n N` applied) and its printed text must be the
block's, line for line, so the page cannot drift from the program again (issue 43: the worked `plan
study/grid.csv` example had). The numbers its prose quotes from `plan` are recomputed too."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from safetyrepro.cli import main

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "analysis.md"


def _examples() -> list[tuple[str, list[str]]]:
    blocks = re.findall(r"^```\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.M | re.S)
    out = []
    for block in blocks:
        lines = block.splitlines()
        if lines and lines[0].startswith("$ safetyrepro "):
            out.append((lines[0][2:], lines[1:]))
    return out


def test_the_page_quotes_the_plan_examples():
    commands = [c for c, _ in _examples()]
    assert "safetyrepro plan --discordance 0.3 --effect 0.1 --configs 48 --items 300" in commands
    assert "safetyrepro plan study/grid.csv | head -n 5" in commands


@pytest.mark.parametrize(("command", "expected"), _examples(), ids=[c for c, _ in _examples()])
def test_a_quoted_command_prints_what_the_page_shows(command, expected, capsys, monkeypatch, data_dir):
    command, _, pipe = command.partition(" | ")
    argv = shlex.split(command)[1:]
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    if pipe:
        head = shlex.split(pipe)
        assert head[:2] == ["head", "-n"], pipe
        printed = printed[: int(head[2])]
    assert printed == expected


def test_the_numbers_the_page_quotes_from_plan():
    from safetyrepro.analysis.paired.power import items_needed, power

    text = " ".join(DOC.read_text(encoding="utf-8").split())
    need = [items_needed(d, 0.1, 48).n_items for d in (0.2, 0.3, 0.4)]
    single = [items_needed(d, 0.1, 1).n_items for d in (0.2, 0.3, 0.4)]
    assert (
        f"needs {need[0]}, {need[1]} and {need[2]} items per configuration at discordance 0.2, 0.3 and 0.4 "
        f"({single[0]}, {single[1]} and {single[2]} for a single configuration)" in text
    )
    at_24, at_d, at_300 = power(24, 0.3, 0.1, 48).power, power(24, 0.3, 0.3, 48).power, power(300, 0.3, 0.1, 48).power
    assert (
        f"its power is {at_24:.2g}, and even E = D is found with power {at_d:.2g}; at 300 items it is {at_300:.3f}"
        in text
    )
