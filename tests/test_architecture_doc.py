"""docs/architecture.md says what the code does: each claim a test can check, checked here against the
code (the layers and circles themselves: tests/test_import_layers.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from package_dirs import PACKAGE_DIRS
from test_import_layers import GROUND, MODULES, _all_imports

from safetyrepro.cli import SUBCOMMANDS

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
SOURCES = {name: path for name, path in MODULES.items()}


def _tree(name: str) -> ast.Module:
    return ast.parse(SOURCES[name].read_text(encoding="utf-8"))


def test_every_file_the_page_names_is_there():
    files = {p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if ".venv" not in p.parts and p.is_file()}
    named = set(re.findall(r"`([\w./-]+\.(?:py|md|toml|yaml))`", DOC))
    missing = [n for n in sorted(named) if not any(f == n or f.endswith("/" + n) for f in files)]
    assert missing == []


def test_the_ground_row_names_the_ground_modules():
    row = next(line for line in DOC.splitlines() if line.startswith("| ground |"))
    assert set(re.findall(r"`(\w+)\.py`", row.split("|")[2])) == set(GROUND)


def test_the_package_dir_mapping_is_the_one_in_pyproject():
    said = dict(re.findall(r"`(\w+)/` (?:is )?`(safetyrepro\.\w+)`", DOC))
    assert {package: folder for folder, package in said.items()} == {
        p: f for p, f in PACKAGE_DIRS.items() if p != "safetyrepro"
    }
    setup = (REPO / "setup.py").read_text(encoding="utf-8")
    assert "package-dir" in setup and "safetyrepro_tasks" not in setup  # read, not written again


def test_the_error_types_are_the_ones_the_page_names():
    """Every exception class the package defines is named in the Errors paragraph, and no other."""
    defined = set()
    for name in SOURCES:
        for node in ast.walk(_tree(name)):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(b).split(".")[-1] in {"Exception", "UserError", "ValueError", "RuntimeError"}
                for b in node.bases
            ):
                defined.add(node.name)
    paragraph = next(p for p in DOC.split("\n\n") if p.startswith("**Errors.**"))
    assert (
        defined
        == set(re.findall(r"`(\w+(?:Error|Refused)|Refused|Unplaced)`", paragraph))
        == {
            "UserError",
            "OutputsCacheError",
            "BadInputError",
            "Refused",
            "Unplaced",
        }
    )


def test_subcommands_are_listed_in_one_dict_and_each_module_registers_its_own():
    assert "`SUBCOMMANDS` in `cli.py`" in DOC and "`register(subparsers)`" in DOC
    adds = {name for name in SOURCES if ".add_parser(" in SOURCES[name].read_text(encoding="utf-8")}
    assert adds - {"safetyrepro.cli"} <= set(SUBCOMMANDS.values())
    for module in SUBCOMMANDS.values():
        assert any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in _tree(module).body), (
            f"{module} has no register()"
        )


def _writes(name: str, target: str) -> bool:
    """Whether a function of the module both names `target` and calls atomic_write."""
    for fn in ast.walk(_tree(name)):
        if isinstance(fn, ast.FunctionDef):
            text = ast.unparse(fn)
            if f"'{target}'" in text and "atomic_write(" in text:
                return True
    return False


def test_the_sweeps_run_json_is_written_by_the_runner_and_its_cells_by_the_store():
    assert "`runner.py` writes `run.json`" in DOC
    sweep = [n for n in SOURCES if n.startswith("safetyrepro.sweep.")]
    assert [n for n in sweep if _writes(n, "run.json")] == ["safetyrepro.sweep.runner"]
    assert [n for n in sweep if _writes(n, "sweep.json")] == ["safetyrepro.sweep.store"]


def test_nothing_in_the_analysis_folder_imports_the_runs_or_the_studies():
    above = ("safetyrepro.sweep", "safetyrepro.importers", "safetyrepro.certify", "safetyrepro.eee")
    bad = [
        f"{name} imports {d}"
        for name, path in SOURCES.items()
        if name.startswith("safetyrepro.analysis")
        for d in _all_imports(path, name, type_only=True)
        if d.startswith(above)
    ]
    assert bad == []


# eee/export.py's own stage-and-rename goes through atomic.py in the importers' change of issue 42 (item 2)
def test_files_and_folders_take_their_names_only_through_atomic_py():
    """A rename into place, or a temporary file that becomes one, is atomic.py's (one write helper)."""
    pattern = re.compile(r"\bos\.(replace|rename)\(|NamedTemporaryFile|mkstemp\(")
    renaming = {n for n, p in SOURCES.items() if pattern.search(p.read_text(encoding="utf-8"))}
    assert renaming == {"safetyrepro.atomic"}


def test_one_module_opens_a_model_for_its_cells():
    """sweep/cell.py is the one way a cell runs: the only place a backend is put behind the outputs cache
    and a driver made, for the local executor, the Ray workers and certify's oracle."""
    assert "`safetyrepro/sweep/cell.py` is the one way a cell runs" in DOC
    opening = {
        n for n, p in SOURCES.items() if re.search(r"\b(CachedBackend|make_driver)\(", p.read_text(encoding="utf-8"))
    }
    assert opening - {"safetyrepro.sweep.drivers", "safetyrepro.sweep.cached_backend"} == {"safetyrepro.sweep.cell"}
    for user in ("safetyrepro.sweep.runner", "safetyrepro.sweep.ray_executor", "safetyrepro.certify.live_oracle"):
        assert "safetyrepro.sweep.cell" in _all_imports(SOURCES[user], user), user


def test_certify_imports_the_analysis_package_at_most_five_times():
    """Issue 55: certify's statistics are the engine's (safetyrepro/sequential/) and the grid it reads is the
    contract's (safetyrepro/grid/); what it still takes from the analysis is the readings (what a claim rests on)
    and the output folder's check. Counted as import statements, function bodies included."""
    statements = [
        f"{name}:{node.lineno}"
        for name in SOURCES
        if name.startswith("safetyrepro.certify")
        for node in ast.walk(_tree(name))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("safetyrepro.analysis")
        or isinstance(node, ast.Import)
        and any(a.name.startswith("safetyrepro.analysis") for a in node.names)
    ]
    assert len(statements) <= 5, statements
