"""scripts/typecheck.py lays the package-dir folders out by import path for mypy and maps its messages back
(no mypy run here: `make lint` runs it, and fails unless mypy reports the canary's wrong-typed calls)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
typecheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(typecheck)


def test_the_tree_holds_each_mapped_folder_at_its_import_path(tmp_path):
    dirs = typecheck.package_dirs()
    assert dirs["safetyrepro.analysis"] == ROOT / "analysis"
    typecheck.lay_out(dirs, tmp_path)
    top = tmp_path / "safetyrepro"
    assert top.is_dir() and not top.is_symlink()  # a real folder: the mapped packages sit inside it
    for name, folder in [("tasks", "safetyrepro_tasks"), ("adapters", "adapters"), ("analysis", "analysis")]:
        assert (top / name).resolve() == ROOT / folder
    assert (top / "crosspkg" / "study.py").resolve() == ROOT / "crosspkg" / "study.py"
    assert (top / "atomic.py").resolve() == ROOT / "safetyrepro" / "atomic.py"
    assert (top / "sweep" / "plan.py").resolve() == ROOT / "safetyrepro" / "sweep" / "plan.py"
    assert not (top / "__pycache__").exists()


def test_messages_name_the_checkouts_files():
    dirs = typecheck.package_dirs()
    line = "safetyrepro/tasks/envelope.py:3: error: Bad  [arg-type]"
    assert typecheck.to_checkout(line, dirs) == "safetyrepro_tasks/envelope.py:3: error: Bad  [arg-type]"
    assert typecheck.to_checkout("safetyrepro/analysis/a.py:1: note: x", dirs) == "analysis/a.py:1: note: x"
    assert (
        typecheck.to_checkout("safetyrepro/sweep/plan.py:9: error: y", dirs) == "safetyrepro/sweep/plan.py:9: error: y"
    )
    assert typecheck.to_checkout("Found 2 errors", dirs) == "Found 2 errors"


def test_the_canary_has_one_wrong_call_per_layer_it_guards():
    lines = typecheck.CANARY.splitlines()
    guarded = [lines[n - 1].split("# canary: ")[1] for n in sorted(typecheck.canary_lines())]
    assert guarded == ["analysis", "certify", "sweep", "tasks"]
