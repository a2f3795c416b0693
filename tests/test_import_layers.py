"""Every module imports on its own, and no two modules import each other at module level.

`test_each_module_imports_alone_in_a_fresh_interpreter` imports each module as the first thing a
fresh interpreter does (a circle shows up there as "partially initialized module" whichever module
of it comes first); `test_no_import_circle_at_module_level` reads the module-level imports of the
source and looks for a cycle, which also catches circles that happen to import in every order.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from package_dirs import PACKAGE_DIRS as ROOTS  # import package -> folder, as pyproject.toml maps them

REPO = Path(__file__).resolve().parents[1]
# third-party packages that live in another venv or an optional extra: a module needing one is skipped
OPTIONAL = {"helm", "ray", "bitsandbytes", "llama_cpp"}


def _module_files() -> dict[str, Path]:
    out = {}
    for root, folder in ROOTS.items():
        base = REPO / folder
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(base).with_suffix("")
            parts = [x for x in rel.parts if x != "__init__"]
            if "__pycache__" in rel.parts or rel.name == "__main__":
                continue
            if any(not (base.joinpath(*rel.parts[:i]) / "__init__.py").is_file() for i in range(1, len(rel.parts))):
                continue  # not inside a package
            out[".".join([root, *parts])] = p
    return out


MODULES = _module_files()


def test_every_mapped_folder_is_seen():
    assert {
        "safetyrepro.cli",
        "safetyrepro.tasks.benchmarks.bbq.definition",
        "safetyrepro.adapters.engine.engine",
        "safetyrepro.analysis",
        "safetyrepro.crosspkg.study",
        "safetyrepro.compat.lm_eval",
    } <= set(MODULES)


def _module_level_imports(name: str, path: Path) -> set[str]:
    """safetyrepro modules imported when `name` is executed (function bodies and TYPE_CHECKING left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    base = ".".join(up[: len(up) - node.level + 1] + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import submodule`
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.Try, ast.With)):
                visit(node.body)
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    out = set()
    for imp in found:
        parts = imp.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b and a.b.c
            if ".".join(parts[:i]) in MODULES:
                out.add(".".join(parts[:i]))
    out.discard(name)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # a package's __init__ is run before its submodules: importing a.b.c from inside a/__init__ is
    # how packages re-export, not a circle, so edges from a submodule to its own parents are left out
    for m, deps in graph.items():
        deps -= {p for p in deps if m.startswith(p + ".")}
    cycles, state, stack = [], {}, []

    def dfs(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                dfs(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)
    return cycles


def test_no_import_circle_at_module_level():
    cycles = _cycles({m: _module_level_imports(m, p) for m, p in MODULES.items()})
    assert cycles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_circle_even_through_imports_inside_functions():
    """A circle hidden in a function-level import (a backend importing the factory that imports it) works
    until someone moves the import up; the layers are meant to point one way, so none is allowed."""

    def runs(imported: str) -> set[str]:  # importing a.b.c runs a, a.b and a.b.c
        parts = imported.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(MODULES)

    graph = {m: {d for imp in _all_imports(p, m) for d in runs(imp)} - {m} for m, p in MODULES.items()}
    cycles = _cycles(graph)
    assert cycles == [], "import circles (function-level imports included):\n" + "\n".join(
        " -> ".join(c) for c in cycles
    )


def test_no_import_circle_even_through_type_only_imports():
    """A circle that only an `if TYPE_CHECKING:` import closes runs, but it says the two modules need each
    other: the type belongs below both (a type checker reads these imports as real ones)."""

    def runs(imported: str) -> set[str]:
        parts = imported.split(".")
        return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(MODULES)

    graph = {m: {d for imp in _all_imports(p, m, type_only=True) for d in runs(imp)} - {m} for m, p in MODULES.items()}
    cycles = _cycles(graph)
    assert cycles == [], "import circles (type-only imports included):\n" + "\n".join(" -> ".join(c) for c in cycles)


PROBE = """
import importlib, sys
name = sys.argv[1]
try:
    importlib.import_module(name)
except ModuleNotFoundError as e:
    top = (e.name or "").split(".")[0]
    if top in {optional!r}:
        print("SKIP", top)
        sys.exit(0)
    raise
print("OK")
"""


def _import_alone(name: str) -> tuple[str, int, str]:
    env = {**os.environ, "SAFETYREPRO_NO_LM_EVAL_HOOK": ""}
    res = subprocess.run(
        [sys.executable, "-c", PROBE.format(optional=OPTIONAL), name],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    return (
        name,
        res.returncode,
        (res.stdout + res.stderr).strip().splitlines()[-1:] and (res.stdout + res.stderr)[-1500:],
    )


@pytest.mark.slow
def test_each_module_imports_alone_in_a_fresh_interpreter():
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_import_alone, sorted(MODULES)))
    failed = [f"{n}:\n{out}" for n, rc, out in results if rc != 0]
    assert failed == [], "\n\n".join(failed)


def _all_imports(path: Path, name: str | None = None, type_only: bool = False) -> set[str]:
    """Every module a file imports, function bodies included (relative imports resolved when the file's
    module name is given; `if TYPE_CHECKING:` blocks left out, they never run, unless `type_only`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = None if name is None else name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if package is None:
                    continue
                up = package.split(".")
                base = ".".join(up[: len(up) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def test_below_the_command_line_nothing_reads_argparse_or_imports_a_cli_module():
    """Layers: command-line modules turn arguments into options (SweepOptions, ...); the modules
    below them take those options and never reach back up, not even inside a function."""

    def is_cli(m: str) -> bool:
        return m.endswith((".cli", "_cli")) or m in ("safetyrepro.demo", "safetyrepro.crosspkg.__main__")

    bad = []
    for name, path in MODULES.items():
        if is_cli(name):
            continue
        ups = sorted(m for m in _all_imports(path, name) if m in MODULES and is_cli(m))
        if ups:
            bad.append(f"{name} imports {', '.join(ups)}")
    assert bad == [], "\n".join(bad)


# The layers, bottom to top (docs/architecture.md). A module may import its own layer and those below it,
# never one above, not even inside a function; circles within a layer are caught above.
GROUND = ("errors", "atomic", "limits", "cache_root", "markdown", "provenance", "console", "grid_schema", "hashing")
LAYERS = (
    # the anytime-valid engine (safetyrepro/sequential/) is on the ground floor: numpy and the ground modules only
    ("ground", lambda m: m == "safetyrepro" or m.split(".")[1] in (*GROUND, "sequential")),
    ("compat", lambda m: m.startswith("safetyrepro.compat")),
    ("benchmarks", lambda m: m.startswith("safetyrepro.tasks")),
    ("grid contract", lambda m: m.startswith("safetyrepro.grid")),
    (
        "models",
        lambda m: (
            m.startswith("safetyrepro.adapters") or m in ("safetyrepro.lm_eval_plugin", "safetyrepro.inspect_plugin")
        ),
    ),
    ("statistics", lambda m: m.startswith("safetyrepro.analysis")),
    ("runs", lambda m: m.split(".")[1] in ("sweep", "importers", "anytask")),
    (
        "studies and formats",
        lambda m: m.split(".")[1] in ("certify", "eee", "flow", "crosspkg", "equivalence", "stopping", "verdict_api"),
    ),
)


def _is_entry(m: str) -> bool:
    return m.endswith((".cli", "_cli")) or m in ("safetyrepro.cli", "safetyrepro.demo", "safetyrepro.crosspkg.__main__")


def layer_of(m: str) -> int:
    if _is_entry(m):
        return len(LAYERS)
    for i, (_, member) in enumerate(LAYERS):
        if member(m):
            return i
    raise AssertionError(f"{m} is in no layer: add it to LAYERS (and to docs/architecture.md)")


# the package's one public function, `safetyrepro.verdict`, is loaded by the package's __getattr__ on first use
# (issue 57): the one import upward, by design, so that `import safetyrepro` stays light
FACADE = {("safetyrepro", "safetyrepro.verdict_api")}


def test_nothing_below_imports_anything_above():
    bad = []
    for name, path in MODULES.items():
        mine = layer_of(name)
        for d in _all_imports(path, name):
            if d in MODULES and layer_of(d) > mine and (name, d) not in FACADE:
                names = [n for n, _ in LAYERS] + ["entry points"]
                bad.append(f"{name} ({names[mine]}) imports {d} ({names[layer_of(d)]})")
    assert bad == [], "\n".join(sorted(bad))


# Packages slow or optional enough to load inside a function, so that `safetyrepro --help`, every input
# error and every process start (the lm-eval hook) answer at once. Any other import belongs at the top.
LAZY_PACKAGES = {
    "torch",
    "transformers",
    "lm_eval",
    "inspect_ai",
    "inspect_flow",
    "ray",
    "matplotlib",
    "statsmodels",
    "lightgbm",
    "shap",
    "scipy",
    "sklearn",
    "datasets",
    "helm",
    "bitsandbytes",
    "llama_cpp",
    "pyarrow",
    "pandas",
    "numpy",
    "yaml",
    "rich",
    "tqdm",
    "huggingface_hub",
    "tokenizers",
    "accelerate",
    "safetensors",
    "gguf",
    "openai",
    "jsonschema",
    "every_eval_ever",
    "sqlitedict",
    "pydantic",
    "zstandard",
    "duckdb",
    "httpx",
    "requests",
    "jinja2",
    "psutil",
    "sentencepiece",
    "evaluate",
    "nltk",
    "spacy",
}
# modules whose imports are all lazy by design: the entry points load a command's machinery when it runs,
# and the lm-eval start-up hook runs in every Python process of the environment
ALL_LAZY = {"safetyrepro.lm_eval_plugin"}


def _third_party_at_top(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Try):
            for n in node.body:
                if isinstance(n, ast.Import):
                    out.update(a.name.split(".")[0] for a in n.names)
                elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                    out.add(n.module.split(".")[0])
    return out & LAZY_PACKAGES


def test_an_import_inside_a_function_loads_something_slow_or_says_why():
    """An import inside a function is kept only where it loads a slow or optional package that the module
    does not load already (read from the source: the package itself, or a module of ours that imports
    it at its top), or where a `# lazy: <why>` comment says what else keeps it there."""
    top = {m: _module_level_imports(m, p) for m, p in MODULES.items()}
    slow_top = {m: _third_party_at_top(p) for m, p in MODULES.items()}

    def slow(m: str) -> set[str]:  # what importing m loads, of LAZY_PACKAGES
        seen, todo, out = {m}, [m], set()
        while todo:
            x = todo.pop()
            out |= slow_top[x]
            for d in top[x] - seen:
                seen.add(d)
                todo.append(d)
        return out

    bad = []
    for name, path in sorted(MODULES.items()):
        if _is_entry(name) or name in ALL_LAZY:
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        checking = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        mine = slow(name)
        inner = [
            n
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in ast.walk(fn)
            if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in checking
        ]
        for node in dict.fromkeys(inner):
            if any("# lazy:" in line for line in lines[node.lineno - 1 : node.end_lineno]):
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    base = ".".join(up[: len(up) - node.level + 1] + ([base] if base else []))
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                names = [a.name for a in node.names]
            loads = set()
            for imported in names:
                parts = imported.split(".")
                loads |= {parts[0]} & LAZY_PACKAGES
                for i in range(1, len(parts) + 1):
                    if ".".join(parts[:i]) in MODULES:
                        loads |= slow(".".join(parts[:i]))
            if not loads - mine:
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert bad == [], (
        "imports inside functions that load nothing slow the module does not load already: move "
        "them to the top, or say why with `# lazy: ...`:\n" + "\n".join(bad)
    )
