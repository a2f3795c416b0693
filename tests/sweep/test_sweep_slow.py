"""The sweeper on a real model (SmolLM2): resume after kill -9, cached reruns, Ray, failures."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

# float32: on CPUs without native bf16 (AVX2) the faster precision; what these tests check does not depend on it
SMALL = [
    "--benchmarks",
    "toxigen",
    "xstest",
    "--tier",
    "conservative_core",
    "--limit",
    "3",
    "--precision",
    "fp32",
    "--no-progress",
]


def sweep_cmd(out: Path, *extra: str, models=("smollm2",)) -> list[str]:
    return [sys.executable, "-m", "safetyrepro.cli", "sweep", "--models", *models, *SMALL, *extra, "--out", str(out)]


def env_with_cache(cache: Path) -> dict:
    """An outputs cache of its own; the model weights (and their dequantised folders) are shared."""
    from safetyrepro.adapters.catalogue.weights import cache_sharing_models

    return {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache_sharing_models(cache)), "TQDM_DISABLE": "1"}


def run(cmd, env, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("reference")
    res = run(sweep_cmd(root / "out"), env_with_cache(root / "cache"))
    assert res.returncode == 0, res.stderr[-3000:]
    return root, res


def test_grid_shape_and_columns(reference):
    root, res = reference
    grid = pd.read_csv(root / "out" / "grid.csv")
    assert len(grid) == 8 and grid["config_id"].is_unique
    assert list(grid.columns[:14]) == [
        "model",
        "benchmark",
        "template",
        "decoding",
        "shots",
        "scoring",
        "precision",
        "package",
        "n_items",
        "n_seeds",
        "score",
        "parse_rate",
        "tier",
        "config_id",
    ]
    assert set(grid["tier"]) == {"core"} and (grid["n_items"] == 3).all() and (grid["n_seeds"] == 1).all()
    assert grid["score"].between(0, 1).all() and (grid.loc[grid.scoring == "logprob", "parse_rate"] == 1).all()
    items = pd.read_parquet(root / "out" / "items.parquet")
    assert len(items) == 8 * 3
    means = items.groupby("config_id")["item_score"].mean()
    assert (grid.set_index("config_id")["score"] - means).abs().max() < 1e-12
    assert "8 of 8 cells in the grid, 8 run now" in res.stdout


def test_cell_records_say_what_computed_them_and_what_they_cost(reference):
    import json
    import re

    from safetyrepro.adapters.engine.engine import DECODE_VERSION

    root, _ = reference
    recs = [json.loads(p.read_text()) for p in sorted((root / "out" / "cells").glob("*/*.json"))]
    assert len(recs) == 8
    for rec in recs:
        assert rec["elapsed_s"] > 0 and rec["cpu_s"] > 0
        assert rec["computed_by"]["decode"] == DECODE_VERSION
        commit = rec["computed_by"]["commit"]
        assert commit is None or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", commit)


def test_rerun_does_no_model_work(reference):
    root, _ = reference
    before = (root / "out" / "grid.csv").read_bytes()
    t0 = time.time()
    res = run(sweep_cmd(root / "out"), env_with_cache(root / "cache"))
    assert res.returncode == 0
    assert "all 8 cells were already in" in res.stdout and "no model work" in res.stdout
    assert (root / "out" / "grid.csv").read_bytes() == before
    assert time.time() - t0 < 60  # no model is loaded


def test_a_new_directory_is_served_from_the_output_cache(reference, tmp_path):
    root, _ = reference
    res = run(sweep_cmd(tmp_path / "again"), env_with_cache(root / "cache"))
    assert res.returncode == 0
    assert (tmp_path / "again" / "grid.csv").read_bytes() == (root / "out" / "grid.csv").read_bytes()


def test_kill_9_at_random_points_then_resume(reference, tmp_path):
    """SIGKILL the sweep while it works, several times, then finish it: the grid equals an
    uninterrupted run's, byte for byte, with no duplicate or missing cell."""
    root, _ = reference
    out, env = tmp_path / "crashy", env_with_cache(tmp_path / "cache")
    cells = out / "cells"
    kills = 0
    for wait_for in (0, 1, 3, 5):  # cell files present when we kill (0: two seconds into start-up)
        proc = subprocess.Popen(sweep_cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = time.time()
        while proc.poll() is None and time.time() - start < 600:
            n = len(list(cells.glob("*/*.json"))) if cells.exists() else 0
            if (wait_for == 0 and time.time() - start > 2) or (wait_for and n >= wait_for):
                break
            time.sleep(0.2)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
    assert kills >= 2
    res = run(sweep_cmd(out), env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "grid.csv").read_bytes() == (root / "out" / "grid.csv").read_bytes()
    grid = pd.read_csv(out / "grid.csv")
    assert not grid.duplicated(["model", "config_id"]).any() and len(grid) == 8
    assert not list(out.rglob("*.tmp"))  # temp files of killed runs are swept away


def test_second_sweep_into_the_same_directory_is_refused(tmp_path, data_dir):
    out, env = tmp_path / "busy", env_with_cache(tmp_path / "cache")
    first = subprocess.Popen(sweep_cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (out / ".lock").exists() or not (out / ".lock").read_text():
            assert time.time() < deadline and first.poll() is None
            time.sleep(0.1)
        second = run(sweep_cmd(out), env, timeout=120)
        assert second.returncode == 2 and f"another sweep (pid {first.pid}) is writing to" in second.stderr
    finally:
        first.kill()
        first.wait()


def test_a_model_that_fails_to_load_is_recorded_and_the_sweep_goes_on(tmp_path, data_dir):
    """A GGUF whose header reads (so the checks before loading pass) but that holds no model: the
    load fails, its cells are recorded as failed, and the other model's cells run."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes((b"GGUF" + struct.pack("<IQQ", 3, 0, 0)).ljust(32, b"\0"))  # data starts 32-aligned
    res = run(
        sweep_cmd(tmp_path / "out", "--benchmarks", "xstest", models=(str(broken), "smollm2")),
        env_with_cache(tmp_path / "cache"),
    )
    assert res.returncode == 2
    grid = pd.read_csv(tmp_path / "out" / "grid.csv")
    assert set(grid["model"]) == {"smollm2"} and len(grid) == 4
    assert "4 failed" in res.stdout and "model failed to load" in res.stdout


def test_ray_executor_gives_the_local_grid(reference, tmp_path, smollm2_hf_folder_fp32):
    """Two local Ray workers, one model each (the embedded SmolLM2 and its exported float32 folder, the same
    numbers): each model's cells equal the local run's (the module's reference sweep) to the bit."""
    root, _ = reference
    env = env_with_cache(tmp_path / "cache")
    models = ("smollm2", str(smollm2_hf_folder_fp32))
    ray = run(sweep_cmd(tmp_path / "ray", "--executor", "ray", "--workers", "2", models=models), env)
    assert ray.returncode == 0, ray.stderr[-3000:]
    grid = pd.read_csv(tmp_path / "ray" / "grid.csv")
    assert len(grid) == 16 and "16 run now" in ray.stdout
    local = pd.read_csv(root / "out" / "grid.csv").set_index("config_id").sort_index()
    for model in models:
        rows = grid[grid.model == model].set_index("config_id").sort_index()
        assert rows.index.equals(local.index)
        for col in ("score", "parse_rate", "n_items", "n_seeds"):
            assert rows[col].equals(local[col]), (model, col)
