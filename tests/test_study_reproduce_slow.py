"""scripts/study/reproduce.sh, the study's one command, on a few items: it finishes and writes the same
kinds of files as the published study (grid, per-item records, run record, analysis with report and
GRID card, the precision and item-subsample comparisons). The narrowing options are passed through to
every sweep, as the script documents; the full study is not a test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # heavy: `make test-heavy`, not CI (see .ci/run)

ROOT = Path(__file__).resolve().parent.parent


def _reproduce(out: Path, saved: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TQDM_DISABLE": "1",
        "SAFETYREPRO": str(Path(sys.executable).parent / "safetyrepro"),
        "STUDY_SAVED": str(saved),
        **(env or {}),
    }
    res = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "study" / "reproduce.sh"),
            "--limit",
            "4",
            "--out",
            str(out),
            "--models",
            "smollm2",
            "gemma3-270m",
            "--benchmarks",
            "xstest",
            "--tier",
            "conservative_core",
            "--scoring",
            "logprob",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        cwd=out.parent,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return res


def test_reproduce_script_with_limit_writes_every_kind_of_file(tmp_path, data_dir):
    out, saved = tmp_path / "study", tmp_path / "saved"
    res = _reproduce(out, saved)
    for f in (
        "grid/grid.csv",
        "grid/grid.parquet",
        "grid/items.parquet",
        "grid/run.json",
        "analysis/rho_flip.csv",
        "analysis/orderings.csv",
        "analysis/report.md",
        "analysis/report.html",
        "analysis/grid_card.md",
        "analysis/grid_card.json",
        "precision/compare_report.md",
        "subsamples/compare_report.md",
    ):
        assert (out / f).is_file(), f
    grid = pd.read_csv(out / "grid" / "grid.csv")
    assert set(grid["model"]) == {"smollm2", "gemma3-270m"} and (grid["precision"] == "fp32").all()
    assert (grid["n_items"] == 4).all()
    assert set(pd.read_csv(out / "precision-nf4" / "grid.csv")["precision"]) == {"nf4"}
    assert "study: done" in res.stdout

    # --save keeps every step's finished cells; a new machine (a fresh run folder) restores all of them and
    # computes nothing again
    _reproduce(out, saved, "--save")
    for step in ("", "steps/precision-bf16/", "steps/precision-nf4/", "steps/sub43/", "steps/sub45/"):
        cells = len(pd.read_csv(out / (step[len("steps/") :] or "grid/") / "grid.csv"))
        assert len(list((saved / step / "cells").glob("*/*.json.gz"))) == cells, step
    again = tmp_path / "again"
    again.mkdir()
    published = tmp_path / "published"
    res = _reproduce(again / "study", saved, "--publish", env={"STUDY_PUBLISH": str(published)})
    restored = [int(n) for n in re.findall(r"^restored (\d+) saved cell", res.stdout, re.M)]
    assert len(restored) == 6 and min(restored) > 0, res.stdout[-3000:]
    for f in ("grid/grid.csv", "precision-nf4/grid.csv", "sub44/grid.csv"):
        a, b = pd.read_csv(out / f), pd.read_csv(again / "study" / f)
        cols = ["config_id", "model", "score", "n_items"]
        a, b = (x[cols].sort_values(cols[:2]).reset_index(drop=True) for x in (a, b))
        assert a.equals(b), f
    # --publish (into a folder of the test's) writes what study/README.md lists, and a fresh analyze of the
    # published grid reproduces the published tables byte for byte
    for f in (
        "grid.csv",
        "grid.parquet",
        "items.parquet",
        "run.json",
        "analysis/report.md",
        "precision/compare_report.md",
        "subsamples/compare_report.md",
        "paper_comparison.md",
    ):
        assert (published / f).is_file(), f
    assert "rho_flip max, xstest, full envelope" in (published / "paper_comparison.md").read_text()
    from test_study_published_slow import assert_reproduces

    assert_reproduces(published, tmp_path / "reanalysis")
