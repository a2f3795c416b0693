"""docs/api.md's engine example runs as written and prints what the page shows: `certify` as a library on a task
of the user's own (its direction given, not looked up), and a stopping rule fed one paired difference at a time."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_engine_example_prints_what_the_page_shows(capsys):
    section = DOC.read_text()[DOC.read_text().index("## The anytime-valid engine") :]
    code, shown = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[:2]
    exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})  # noqa: S102 - the page's code, as a reader runs it
    assert capsys.readouterr().out.splitlines() == shown.strip().splitlines()
    assert "stable_a after 64 of 400" in shown  # a: 0.75, b: 0.45 right: a lead of 0.3 decided on a fifth of the items
