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


@pytest.mark.slow
def test_docs_certify_quotes_what_plan_grid_certify_prints_on_the_study(capsys, monkeypatch):
    """docs/certify.md: on the 24-item study at a 0.1 lead, ToxiGen's twins (r 0.91-0.97) bring its pairs from
    256-930 items to 186-250, BBQ's (0.63-0.82) from 482-697 to 314-340."""
    import json

    from safetyrepro.cli import main

    monkeypatch.chdir(REPO)
    assert main(["plan", "study/grid.csv", "--certify", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)

    def span(benchmark, key, fmt="{:,.0f}"):
        values = [r[key] for r in rows if r["benchmark"] == benchmark]
        return f"{fmt.format(min(values))}-{fmt.format(max(values))}"

    text = " ".join((REPO / "docs" / "certify.md").read_text(encoding="utf-8").split())
    toxigen, bbq = (
        (span(b, "twin_r", "{:.2f}"), span(b, "certify_median"), span(b, "twin_median")) for b in ("toxigen", "bbq")
    )
    tracked = f"track their free-form configurations at r = {toxigen[0]} and bring its pairs from {toxigen[1]} items"
    assert f"{tracked} to {toxigen[2]}" in text
    assert f"BBQ's ({bbq[0]}) from {bbq[1]} to {bbq[2]}" in text
