"""The docs' examples run as written (issue 57): every `safetyrepro` command in a shell block of the README and
docs/ parses with the flags it shows (a flag renamed or removed fails here, offline, in seconds), and every Python
block is run by a test: the ones below here, the others by the test the ledger names (which must exist and read
that page). Blocks whose command runs models run in the slow suite (tests/test_readme_commands_slow.py, the
engine example) or are shown with their output by a slow test (docs/certify_examples.md, docs/backends.md)."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest

from safetyrepro.cli import build_parser, with_current_spelling

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

# (page, index of its Python block) -> the test that runs it
RUN_ELSEWHERE = {
    ("api.md", 0): "tests/importers/test_api_doc_example.py",
    ("api.md", 1): "tests/importers/test_api_doc_example.py",
    ("api.md", 3): "tests/certify/test_engine_doc_example.py",
    ("any_task.md", 0): "tests/anytask/test_task_envelope.py",
    ("compare_any_runs.md", 1): "tests/stopping/test_docs_example.py",
    ("models.md", 0): "tests/adapters/test_docs_engine_example_slow.py",
}


def _blocks(kinds: tuple[str, ...]) -> list[tuple[Path, int, str]]:
    out = []
    for page in PAGES:
        found = [(lang, body) for lang, body in FENCE.findall(page.read_text(encoding="utf-8"))]
        python = [body for lang, body in found if lang == "python"]
        if "python" in kinds:
            out += [(page, i, body) for i, body in enumerate(python)]
        if "shell" in kinds:
            out += [(page, i, body) for i, (lang, body) in enumerate(found) if lang in ("bash", "console", "sh", "")]
    return out


def _commands(body: str) -> list[str]:
    """The `safetyrepro ...` commands of a shell block, continuation lines joined, prompts, pipes and comments off."""
    joined = re.sub(r"\\\n\s*", " ", body)
    out = []
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ")
        if line.startswith("safetyrepro "):
            out.append(line.split(" | ")[0])
    return out


SHELL = [(page, cmd) for page, _, body in _blocks(("shell",)) for cmd in _commands(body)]


def test_the_docs_show_commands_to_check():
    assert len(SHELL) >= 40 and {p.name for p, _ in SHELL} >= {"README.md", "certify.md", "compare_any_runs.md"}


@pytest.mark.parametrize("page, command", SHELL, ids=[f"{p.name}: {c[:60]}" for p, c in SHELL])
def test_every_safetyrepro_command_in_the_docs_parses(page, command, capsys):
    # a synopsis' optional parts are checked too: brackets off, the "..." of a list left out
    argv = [a for a in shlex.split(command.replace("[", " ").replace("]", " "), comments=True)[1:] if a != "..."]
    try:
        build_parser().parse_args(with_current_spelling(argv))
    except SystemExit as stop:
        assert stop.code == 0, f"{page.name}: `{command}` does not parse: {capsys.readouterr().err.strip()}"


def test_every_python_block_is_run_by_a_test():
    here = {("api.md", 2), ("compare_any_runs.md", 0), ("adding_a_benchmark.md", 0)}
    blocks = {(page.name, i) for page, i, _ in _blocks(("python",))}
    assert blocks == set(RUN_ELSEWHERE) | here
    for (page, _), test in RUN_ELSEWHERE.items():
        assert page in (REPO / test).read_text(encoding="utf-8"), f"{test} does not read {page}"


def _python(page: str, index: int) -> str:
    return next(body for p, i, body in _blocks(("python",)) if (p.name, i) == (page, index))


def test_api_md_registers_a_table_as_shown(tmp_path, data_dir):
    import sys

    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    import readings_grid as case

    from safetyrepro.analysis import api, tables

    scope: dict = {}
    exec(compile(_python("api.md", 2), "docs/api.md", "exec"), scope)  # noqa: S102 - the page's code
    try:
        grid, items = case.write_case(tmp_path / "case")
        a = api.analyze(pd.read_csv(grid), items=pd.read_parquet(items))
        assert a.registered["cells_per_benchmark"].to_dict("records") == [
            {"benchmark": "bbq", "n_cells": 8, "parse_rate": 0.875}
        ]
    finally:
        tables.unregister_table("cells_per_benchmark")


def test_compare_any_runs_md_gate_test_passes_on_two_real_runs(tmp_path, monkeypatch):
    """The page's pytest example, on the committed lm-eval runs of arc_easy: Qwen2.5-Coder (0.883) as the candidate
    is not worse than SmolLM2 (0.300) by 2 points."""
    runs = REPO / "tests" / "importers" / "fixtures" / "any_task" / "lm_eval"
    shutil.copytree(runs / "qwen2.5-coder-0.5b", tmp_path / "runs" / "candidate")
    shutil.copytree(runs / "smollm2", tmp_path / "runs" / "baseline")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_python("compare_any_runs.md", 0), "docs/compare_any_runs.md", "exec"), scope)  # noqa: S102
    scope["test_candidate_is_not_worse_than_baseline"]()


def test_adding_a_benchmark_md_shows_the_registry_as_it_is():
    """The page quotes the registry's tuple with the one line a new benchmark adds: the rest is the file's."""
    block = _python("adding_a_benchmark.md", 0)
    source = (REPO / "safetyrepro_tasks" / "benchmarks" / "registry.py").read_text(encoding="utf-8")
    assert block.splitlines()[0] in source
    for name in re.findall(r'"(\w+)",', block):
        assert f'"{name}"' in source
