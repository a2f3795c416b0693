"""The published study reproduces: `safetyrepro analyze study/grid.csv` in a fresh folder writes
rho_flip.csv and orderings.csv byte for byte as published in study/analysis/ (the items.parquet and
run.json beside the grid are read as analyze reads them for anyone). Until the study is published
(study/README.md says how far it is), there is nothing to reproduce and the test says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

STUDY = Path(__file__).resolve().parent.parent / "study"


def assert_reproduces(published: Path, out: Path) -> None:
    """`safetyrepro analyze PUBLISHED/grid.csv` into OUT gives the published tables byte for byte."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "safetyrepro.cli",
            "analyze",
            str(published / "grid.csv"),
            "--out",
            str(out),
            "--no-figures",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    for name in ("rho_flip.csv", "orderings.csv", "rho_flip_max.csv", "significant_flips.csv"):
        assert (out / name).read_bytes() == (published / "analysis" / name).read_bytes(), name


@pytest.mark.skipif(
    not (STUDY / "grid.csv").is_file(),
    reason="the study is not published yet (study/progress.md); "
    "tests/test_study_reproduce_slow.py checks the same on a study published from 4 items",
)
def test_the_published_analysis_reproduces_byte_for_byte(tmp_path, data_dir):
    assert_reproduces(STUDY, tmp_path / "analysis")
