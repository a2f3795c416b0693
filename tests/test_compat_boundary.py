"""One door to other packages' internals: no private lm-eval / Inspect / transformers / HELM name
outside safetyrepro/compat/ (ruff's banned-api rule catches the known ones; this catches any
`<package>._private` path, in code and tests alike)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("safetyrepro", "safetyrepro_tasks", "adapters", "analysis", "crosspkg", "tests", "perf", "scripts")
PRIVATE = re.compile(r"\b(inspect_ai|lm_eval|transformers|helm)(\.[A-Za-z0-9_]+)*\._[A-Za-z]")
COMPAT = REPO / "safetyrepro" / "compat"


def _python_files():
    for d in SOURCE_DIRS:
        for p in sorted((REPO / d).rglob("*.py")):
            if COMPAT not in p.parents and p != Path(__file__).resolve():
                yield p


def test_no_private_names_of_other_packages_outside_compat():
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in _python_files()
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if PRIVATE.search(line)]
    assert hits == [], "move these into safetyrepro/compat/<package>.py:\n" + "\n".join(hits)


def test_ruff_bans_the_known_internals_outside_compat(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from inspect_ai._util.error import PrerequisiteError\n"
                     "import lm_eval.api.task as t\nt.tqdm = None\n"
                     "from transformers.cache_utils import DynamicLayer\n")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(REPO / "pyproject.toml"),
                          "--select", "TID251", "--output-format", "concise", str(probe)],
                         capture_output=True, text=True, cwd=tmp_path)
    lines = [x for x in out.stdout.splitlines() if "TID251" in x]
    assert len(lines) == 3, out.stdout + out.stderr
    assert "safetyrepro.compat.inspect_ai" in lines[0] and "safetyrepro.compat.lm_eval" in lines[1]


def test_the_tested_windows_have_both_ends_and_hold_the_installed_versions():
    """pyproject.toml bounds lm-eval, Inspect and transformers on both sides (docs/compat.md says how
    each end was tested), and this environment lies inside them."""
    tomllib = pytest.importorskip("tomllib")
    from importlib.metadata import version

    from packaging.requirements import Requirement

    deps = [Requirement(d) for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    windows = {r.name: r.specifier for r in deps}
    doc = (REPO / "docs" / "compat.md").read_text()
    for name in ("lm-eval", "inspect-ai", "transformers"):
        spec = windows[name]
        assert any(s.operator == ">=" for s in spec) and any(s.operator in ("<", "<=") for s in spec), name
        assert version(name) in spec, f"{name} {version(name)} is outside {spec}"
        assert f"`{','.join(sorted(str(s) for s in spec))}`" in doc or all(str(s) in doc for s in spec), name
