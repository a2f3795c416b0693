"""The Inspect evals linter (inspect-evals-lint 0.12.0, configured in pyproject.toml) passes over every
benchmark folder, as it would over an inspect_evals evaluation: file structure, task exports, tests,
best practices. inspect_evals' own registration rules (eval.yaml, one entry point per evaluation) are
ignored there: ours register through one entry point (safetyrepro.inspect_plugin)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from safetyrepro.tasks.benchmarks.registry import BENCHMARKS

REPO = Path(__file__).resolve().parents[2]


def _lint() -> dict:
    exe = shutil.which("inspect-evals-lint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("inspect-evals-lint is not installed (it is in the dev extra: make install)")
    res = subprocess.run(
        [exe, "--all", "--output-format", "json"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode in (0, 1), res.stderr[-2000:]
    return json.loads(res.stdout)


def test_every_benchmark_folder_passes_the_inspect_evals_linter():
    report = _lint()
    assert sorted(p["name"] for p in report["packages"]) == sorted(BENCHMARKS)
    failed = [
        (p["name"], d["code"], d["message"])
        for p in report["packages"]
        for d in p["diagnostics"]
        if d["status"] == "fail"
    ]
    assert not failed, failed
    assert report["passed"] is True and report["summary"]["fail"] == 0
    # each folder's __init__ exports its @task (IEFS003), and the task is the registered one
    import importlib

    from safetyrepro.tasks.inspect_task_registry import TASKS

    for name in BENCHMARKS:
        assert getattr(importlib.import_module(f"safetyrepro.tasks.benchmarks.{name}"), name) is TASKS[name]
