"""docs/study/reproduce.sh, the study's one command, on a few items: it finishes and writes the same
kinds of files as the published study (grid, per-item records, run record, analysis with report and
GRID card, the precision and item-subsample comparisons). The narrowing options are passed through to
every sweep, as the script documents; the full study is not a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_reproduce_script_with_limit_writes_every_kind_of_file(tmp_path, data_dir):
    out = tmp_path / "study"
    env = {**os.environ, "TQDM_DISABLE": "1", "SAFETYREPRO": str(Path(sys.executable).parent / "safetyrepro")}
    res = subprocess.run(["bash", str(ROOT / "docs" / "study" / "reproduce.sh"), "--limit", "4", "--out", str(out),
                          "--models", "smollm2", "gemma3-270m", "--benchmarks", "xstest", "--tier", "conservative_core",
                          "--scoring", "logprob"], capture_output=True, text=True, env=env, timeout=3600, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    for f in ("grid/grid.csv", "grid/grid.parquet", "grid/items.parquet", "grid/run.json",
              "analysis/rho_flip.csv", "analysis/orderings.csv", "analysis/report.md", "analysis/report.html",
              "analysis/grid_card.md", "analysis/grid_card.json", "precision/compare_report.md",
              "subsamples/compare_report.md"):
        assert (out / f).is_file(), f
    grid = pd.read_csv(out / "grid" / "grid.csv")
    assert set(grid["model"]) == {"smollm2", "gemma3-270m"} and (grid["precision"] == "fp32").all()
    assert (grid["n_items"] == 4).all()
    assert set(pd.read_csv(out / "precision-nf4" / "grid.csv")["precision"]) == {"nf4"}
    assert "study: done" in res.stdout
