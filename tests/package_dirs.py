"""pyproject.toml's package-dir, the one home of the mapping of import packages to folders (setup.py and
scripts/typecheck.py read it too), as the tests read it: import package -> folder name."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
with open(REPO / "pyproject.toml", "rb") as f:
    PACKAGE_DIRS: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
