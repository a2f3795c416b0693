"""One door to other packages' internals: no private lm-eval / Inspect / transformers / HELM name
outside safetyrepro/compat/ (ruff's banned-api rule catches the known ones; this catches any
`<package>._private` path, in code and tests alike)."""

from __future__ import annotations

import ast
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
    hits = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in _python_files()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert hits == [], "move these into safetyrepro/compat/<package>.py:\n" + "\n".join(hits)


def test_ruff_bans_the_known_internals_outside_compat(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from inspect_ai._util.error import PrerequisiteError\n"
        "import lm_eval.api.task as t\nt.tqdm = None\n"
        "from transformers.cache_utils import DynamicLayer\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(REPO / "pyproject.toml"),
            "--select",
            "TID251",
            "--output-format",
            "concise",
            str(probe),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    lines = [x for x in out.stdout.splitlines() if "TID251" in x]
    assert len(lines) == 3, out.stdout + out.stderr
    assert "safetyrepro.compat.inspect_ai" in lines[0] and "safetyrepro.compat.lm_eval" in lines[1]


def test_the_tested_windows_have_both_ends_and_hold_the_installed_versions():
    """pyproject.toml bounds lm-eval, Inspect and transformers on both sides (docs/compat.md says how
    each end was tested), and this environment lies inside them."""
    tomllib = pytest.importorskip("tomllib")
    from importlib.metadata import version

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # the harness extra holds them (issue 57: the core install has none of them)
    deps = [Requirement(d) for d in [*project["dependencies"], *project["optional-dependencies"]["harness"]]]
    windows = {r.name: r.specifier for r in deps}
    doc = (REPO / "docs" / "compat.md").read_text()
    for name in ("lm-eval", "inspect-ai", "transformers"):
        spec = windows[name]
        assert any(s.operator == ">=" for s in spec) and any(s.operator in ("<", "<=") for s in spec), name
        assert version(name) in spec, f"{name} {version(name)} is outside {spec}"
        assert f"`{','.join(sorted(str(s) for s in spec))}`" in doc or all(str(s) in doc for s in spec), name


# -- beyond import paths: attribute access, subclassing and signature sniffing, read from the AST ------
PACKAGE_DIRS = ("safetyrepro", "safetyrepro_tasks", "adapters", "analysis", "crosspkg")
FOREIGN = ("transformers", "lm_eval", "inspect_ai", "helm", "torch")
# the documented ways to extend the packages (a custom model, model provider, few-shot sampler; HELM's
# custom client, scenario and metrics)
EXTENSION_POINTS = {
    "lm_eval.api.model.TemplateLM",
    "lm_eval.api.model.LM",
    "inspect_ai.model.ModelAPI",
    "lm_eval.api.samplers.ContextSampler",
    "helm.clients.client.Client",
    "helm.benchmark.metrics.metric.Metric",
    "helm.benchmark.metrics.reference_metric.ReferenceMetric",
    "helm.benchmark.scenarios.scenario.Scenario",
}


def _imports(tree: ast.AST) -> dict[str, str]:
    """Name bound in a module (at any depth) -> the dotted path it was imported as."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                bound[a.asname or a.name] = f"{node.module}.{a.name}"
    return bound


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _boundary_hits(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = _imports(tree)
    stdlib = set(sys.stdlib_module_names)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain = _dotted(node)
            root = chain[0] if chain else None
            if root in ("self", "cls"):
                continue
            origin = bound.get(root or "", "")
            if origin.split(".")[0] == "safetyrepro" or (origin.split(".")[0] in stdlib and root != "inspect"):
                continue
            hits.append(f"{node.lineno}: private attribute {ast.unparse(node)}")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Call):
                    hits.append(f"{node.lineno}: class {node.name} subclasses what {ast.unparse(base)} returns")
                    continue
                chain = _dotted(base)
                if not chain:
                    continue
                full = ".".join([bound.get(chain[0], chain[0]), *chain[1:]])
                if full.split(".")[0] in FOREIGN and full not in EXTENSION_POINTS:
                    hits.append(f"{node.lineno}: class {node.name} subclasses {full}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("inspect.signature", "signature"):
            target = ast.unparse(node.args[0]) if node.args else ""
            if "." in target:  # our own functions may be introspected; a model's forward may not
                hits.append(f"{node.lineno}: signature of {target}")
    return hits


def test_no_foreign_internals_by_attribute_subclass_or_signature_outside_compat():
    """`model.config._attn_implementation`, `class X(DynamicLayer)` (or of a class a function returns),
    `inspect.signature(model.forward)`: each is a place an upgrade breaks, so each lives in compat."""
    hits = [
        f"{p.relative_to(REPO)}:{h}"
        for d in PACKAGE_DIRS
        for p in sorted((REPO / d).rglob("*.py"))
        if COMPAT not in p.parents
        for h in _boundary_hits(p)
    ]
    assert hits == [], "move these into safetyrepro/compat/<package>.py:\n" + "\n".join(hits)


def test_the_boundary_check_catches_each_kind(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import inspect\nfrom transformers.cache_utils import DynamicLayer\n"
        "from safetyrepro.compat.transformers import dynamic_cache_layer_class\n"
        "def f(model):\n    return model.config._attn_implementation\n"
        "class A(DynamicLayer):\n    pass\n"
        "class B(dynamic_cache_layer_class()):\n    pass\n"
        "def g(model):\n    return inspect.signature(model.forward)\n"
        "class C(object):\n    def h(self):\n        return self._x\n"
    )
    hits = sorted(_boundary_hits(probe), key=lambda h: int(h.split(":")[0]))
    assert [h.split(": ", 1)[1] for h in hits] == [
        "private attribute model.config._attn_implementation",
        "class A subclasses transformers.cache_utils.DynamicLayer",
        "class B subclasses what dynamic_cache_layer_class() returns",
        "signature of model.forward",
    ], hits
