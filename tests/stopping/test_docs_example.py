"""The early-stopping example of docs/compare_any_runs.md runs offline as written (issue 57: the former one
needed inspect_evals and an online model, and its width never stopped): both evals stop, and the sentences
they print are the ones the page shows."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "compare_any_runs.md"


def _section() -> str:
    text = DOC.read_text()
    return text[text.index("## Stopping an Inspect eval") :]


def test_the_stopping_example_runs_as_written_and_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    code, shown = re.findall(r"```(?:python)?\n(.*?)```", _section(), re.S)[:2]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the page's own code, as a reader runs it
    for name, after in (("known", 83), ("paired", 20)):
        meta = namespace[name].results.early_stopping.metadata
        assert meta["stopped"] and meta["stopped_after"] == after < 400
    printed = capsys.readouterr().out  # after Inspect's own display, which may end without a newline
    for line in shown.strip().splitlines():
        assert line in printed
