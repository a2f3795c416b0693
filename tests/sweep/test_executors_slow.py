"""The local and the Ray executor run a cell the same way (safetyrepro/sweep/cell.py): the same failing
cells, run by each, leave the same failure text in their cell files. No model weights are needed: one
model fails as it loads (a GGUF file whose header reads, so the checks before loading pass, but that holds
no model), the other in every cell (Inspect's mock model with outputs it refuses: a string, not a
ModelOutput). Slow: Ray takes seconds to start."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from safetyrepro.cli import main

pytestmark = pytest.mark.slow


def _failures(out: Path) -> dict[str, str]:
    records = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*/*.json"))]
    return {r["key"]: r["error"] for r in records if r["status"] == "failed"}


def test_local_and_ray_record_the_same_failure_text(tmp_path, data_dir, monkeypatch, capsys):
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", str(tmp_path / "cache"))
    broken = tmp_path / "broken.gguf"
    broken.write_bytes((b"GGUF" + struct.pack("<IQQ", 3, 0, 0)).ljust(32, b"\0"))  # data starts 32-aligned
    models = tmp_path / "models.yaml"
    models.write_text(
        f"- spec: {broken}\n  label: unloadable\n"
        "- spec: inspect:mockllm/model\n  label: failing\n  model_args: custom_outputs=x\n"
    )
    cells = ["--configs", "xstest/T1/greedy/0shot/free_form", "--limit", "2", "--no-progress"]
    common = ["sweep", "--models-file", str(models), "--package", "inspect", *cells]
    assert main([*common, "--out", str(tmp_path / "local")]) == 2
    assert main([*common, "--executor", "ray", "--workers", "1", "--out", str(tmp_path / "ray")]) == 2
    capsys.readouterr()

    local, ray = _failures(tmp_path / "local"), _failures(tmp_path / "ray")
    assert set(local) == {"unloadable|xstest/T1/greedy/0shot/free_form", "failing|xstest/T1/greedy/0shot/free_form"}
    assert ray == local
    assert local["unloadable|xstest/T1/greedy/0shot/free_form"].startswith("model failed to load: ")
    assert local["failing|xstest/T1/greedy/0shot/free_form"] == (
        "builtins.RuntimeError: inspect eval xstest/T1/greedy/0shot/free_form ended error: "
        "ValueError(\"output must be an instance of ModelOutput; got <class 'str'>; content: 'x'\")"
    )
