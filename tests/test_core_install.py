"""The core install compares runs that exist (issue 57): in .venv-core (`make core`: `pip install -e .`, no extras,
so no torch, transformers, lm-eval or Inspect), `verdict` on two real lm-eval runs of a task SafetyRepro does not
define (arc_easy, 60 items), `import lm-eval` of a sweep's runs, `analyze`, `verdict --grid`, `plan` and `certify
replay` on the imported grid run and print what the full install prints; a command that runs models stops with one
line naming the `harness` extra. CI builds the venv before the slow tests; without it the test is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "importers"))
from lm_eval_fixtures import write_run  # noqa: E402

from safetyrepro.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / ".venv-core" / "bin" / "safetyrepro"
RUNS = REPO / "tests" / "importers" / "fixtures" / "any_task" / "lm_eval"

pytestmark = [
    pytest.mark.needs_setup,
    pytest.mark.skipif(not CORE.is_file(), reason=".venv-core is absent: `make core` builds it"),
]


def _core(*argv: str, code: int = 0) -> str:
    res = subprocess.run([str(CORE), *argv], capture_output=True, text=True, env={**os.environ}, timeout=600)
    assert res.returncode == code, res.stderr[-2000:]
    return res.stdout if code == 0 else res.stderr


def test_the_core_install_has_no_harness_and_compares_existing_runs(tmp_path, capsys, data_dir):
    python = CORE.parent / "python"
    for heavy in ("torch", "transformers", "lm_eval", "inspect_ai"):
        found = subprocess.run([str(python), "-c", f"import {heavy}"], capture_output=True, text=True)
        assert found.returncode == 1 and "ModuleNotFoundError" in found.stderr, heavy
    # two real runs of any task: the same verdict as the full install prints, byte for byte
    argv = ["verdict", str(RUNS / "smollm2"), str(RUNS / "qwen2.5-coder-0.5b")]
    capsys.readouterr()
    assert main(argv) == 0
    assert _core(*argv) == capsys.readouterr().out
    # a sweep's runs (3 models x 2 shot counts, written as lm-eval leaves them) imported, analysed, certified
    for i, (model, shots, k) in enumerate(
        [(m, s, k) for m, ks in {"a": (5, 2), "b": (2, 5), "c": (4, 4)}.items() for s, k in zip((0, 3), ks)]
    ):
        write_run(tmp_path / "runs", scores=[1.0] * k + [0.0] * (6 - k), shots=shots, model=model, i=i, folder=f"{i}")
    imported = tmp_path / "imported"
    assert "wrote" in _core("import", "lm-eval", str(tmp_path / "runs"), "--out", str(imported))
    assert "rho_flip" in _core("analyze", str(imported / "grid.csv"), "--out", str(tmp_path / "a"), "--no-figures")
    assert (tmp_path / "a" / "rho_flip.csv").is_file() and (tmp_path / "a" / "report.md").is_file()
    for argv in (["verdict", "a", "b", "--grid", str(imported / "grid.csv")], ["plan", str(imported / "grid.csv")]):
        capsys.readouterr()
        assert main(argv) == 0
        assert _core(*argv) == capsys.readouterr().out  # what the full install prints
    said = "xstest: no configuration's difference is confirmed (a ahead on 1, b on 1, tied on 0 of 2)"
    assert said in _core("verdict", "a", "b", "--grid", str(imported / "grid.csv"))  # 5/6 vs 2/6, then 2/6 vs 5/6
    cert = ["certify", "replay", str(imported / "items.parquet"), "--grid", str(imported / "grid.csv")]
    assert "target population" in _core(*cert, "--out", str(tmp_path / "c"), "--quiet")
    assert (tmp_path / "c" / "claims.csv").is_file() and (tmp_path / "c" / "certificate.csv").is_file()
    # what runs models says which extra it needs, in one line
    err = _core(
        "sweep", "--models", "smollm2", "--benchmarks", "xstest", "--limit", "1", "--out", str(tmp_path / "s"), code=2
    )
    assert "which the core install leaves out" in err and "pip install 'safetyrepro[harness]'" in err
    assert len(err.strip().splitlines()) == 1
