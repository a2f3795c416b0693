"""docs/certify_examples.md's replay blocks are what the program prints on the published records (both targets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from safetyrepro.cli import main

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "certify_examples.md"
SECONDS = re.compile(r"\d+\.\d s evaluating")


def _block(command: str) -> list[str]:
    text = DOC.read_text()
    start = text.index(f"$ {command}\n") + len(command) + 3
    return text[start : text.index("```", start)].rstrip("\n").splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["population", "subset"])
def test_the_replay_blocks_match_the_program(tmp_path, capsys, monkeypatch, target):
    monkeypatch.chdir(REPO)
    out = "/tmp/cx/study_cert" if target == "population" else "/tmp/cx/study_subset"
    extra = [] if target == "population" else ["--target", "subset"]
    command = f"safetyrepro certify replay study/items.parquet --grid study/grid.csv {' '.join(extra)}"
    documented = _block(f"{' '.join(command.split())} --out {out}")
    args = command.split()[1:] + ["--out", str(tmp_path / "o"), "--quiet"]
    assert main(args) == 0
    printed = capsys.readouterr().out.rstrip("\n").splitlines()
    printed = [SECONDS.sub("0.0 s evaluating", line.replace(str(tmp_path / "o"), out)) for line in printed]
    assert printed == [SECONDS.sub("0.0 s evaluating", line) for line in documented]
