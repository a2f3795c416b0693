"""Type-check SafetyRepro with mypy, laid out by import path (`make lint` runs it).

pyproject.toml's package-dir maps folders into one import package (`safetyrepro_tasks/` is
`safetyrepro.tasks`, `analysis/` is `safetyrepro.analysis`, ...). mypy finds modules by folder and
follows no import hooks (the editable install reaches the mapped folders through one), so this lays the
folders out as they are imported, as a tree of symlinks outside the checkout, runs mypy on it with the
`[tool.mypy]` settings of pyproject.toml, and maps the paths in mypy's messages back to the checkout's.

    python scripts/typecheck.py

Each run also checks CANARY, a few deliberately wrong-typed calls into the analysis, certify, the sweep
and the tasks: unless mypy reports every one of them (so it found and read those modules), the run fails,
however clean the rest looks. Exit status: 0 clean, 1 type errors, 2 mypy failed or missed a canary.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
TOP = "safetyrepro"
CANARY_NAME = "_typecheck_canary.py"
# Each `# canary` line must draw an [arg-type] error; the imports must resolve for that to happen.
CANARY = """\
from safetyrepro.analysis.metrics.rank_flip import pair_counts
from safetyrepro.certify.algorithm import certify
from safetyrepro.sweep.plan import plan_cells
from safetyrepro.tasks.envelope import benchmark_of

pair_counts("a", "b")  # canary: analysis
certify(42, None, None)  # canary: certify
plan_cells([], [], "rules")  # canary: sweep
benchmark_of(3)  # canary: tasks
"""


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """Import package -> folder, from `[tool.setuptools] package-dir` (the one home of the mapping)."""
    with open(repo / "pyproject.toml", "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {pkg: repo / folder for pkg, folder in mapping.items()}


def lay_out(dirs: dict[str, Path], dest: Path) -> None:
    """Build the import tree of `dirs` at dest: a package with mapped sub-packages is a real folder whose
    entries link to its source folder's, each mapped sub-package a link to its own folder (or, if it has
    mapped sub-packages in turn, a folder built the same way)."""

    def build(pkg: str, at: Path) -> None:
        children = {p.rsplit(".", 1)[1]: p for p in dirs if p.rpartition(".")[0] == pkg}
        if not children:
            at.symlink_to(dirs[pkg], target_is_directory=True)
            return
        at.mkdir()
        for entry in sorted(dirs[pkg].iterdir()):
            if entry.name not in children and entry.name != "__pycache__":
                (at / entry.name).symlink_to(entry)
        for name, child in children.items():
            build(child, at / name)

    build(TOP, dest / TOP)


def tree_root(repo: Path = REPO) -> Path:
    """One folder per checkout, outside it, reused between runs so that mypy's cache (keyed by path) hits."""
    tag = hashlib.sha256(str(repo).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"safetyrepro-typecheck-{os.getuid()}-{tag}"


def to_checkout(line: str, dirs: dict[str, Path]) -> str:
    """mypy's `safetyrepro/tasks/x.py:3: error: ...` -> `safetyrepro_tasks/x.py:3: error: ...`."""
    best = None
    for pkg, folder in dirs.items():
        prefix = pkg.replace(".", "/") + "/"
        if line.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, folder)
    if best is None:
        return line
    prefix, folder = best
    return os.path.relpath(folder, REPO) + "/" + line[len(prefix) :]


def canary_lines() -> set[int]:
    return {n for n, line in enumerate(CANARY.splitlines(), 1) if "# canary" in line}


def main() -> int:
    dirs = package_dirs()
    root = tree_root()
    root.mkdir(mode=0o700, exist_ok=True)
    # One run at a time per checkout (pre-commit and make lint may overlap): the tree is rebuilt each run.
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tree = root / "tree"
        shutil.rmtree(tree, ignore_errors=True)  # links only: rmtree unlinks them, never what they point at
        tree.mkdir()
        lay_out(dirs, tree)
        (tree / CANARY_NAME).write_text(CANARY)
        config = ["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(REPO / ".mypy_cache")]
        cmd = [sys.executable, "-m", "mypy", *config, TOP, CANARY_NAME]
        proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode not in (0, 1):
        print(proc.stdout, end="")
        return 2
    caught: set[int] = set()
    errors = files = 0
    seen: set[str] = set()
    for line in proc.stdout.splitlines():
        if line.startswith(CANARY_NAME + ":"):
            number = line.split(":")[1]
            if line.endswith("[arg-type]") and number.isdigit():
                caught.add(int(number))
            continue
        if line.startswith(("Found ", "Success: ")):
            continue
        line = to_checkout(line, dirs)
        print(line)
        if ": error: " in line:
            errors += 1
            seen.add(line.split(":")[0])
    files = len(seen)
    missed = sorted(canary_lines() - caught)
    if missed:
        lines = CANARY.splitlines()
        for n in missed:
            print(f"typecheck: mypy did not report the wrong call `{lines[n - 1]}` (is it reading the package?)")
        return 2
    if errors:
        print(f"typecheck: {errors} errors in {files} files")
        return 1
    print("typecheck: no errors (and every canary caught)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
