"""`safetyrepro sweep --task` on a task that ships with lm-eval (its arc_easy YAML on a local file, 6 items) for two
embedded models across 8 configurations (0 or 1 shot x chat template off/on x no system instruction or a helpful
one), then `safetyrepro analyze` (issue 58): rho_flip and the orderings are recomputed here from the items; a rerun
asks no model anything, and a sweep killed with SIGKILL resumes to the same grid."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from local_task import arc_easy_local

from safetyrepro.cli import main

pytestmark = pytest.mark.slow

MODELS = ("smollm2", "gemma3-270m")
TASK = "arc_easy_local"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("anytask")
    task = arc_easy_local(root / "work")
    env = root / "envelope.yaml"
    assert main(["envelope", "--task", f"lm-eval:{task}", "--out", str(env)]) == 0
    env.write_text(env.read_text().replace("shots: [0, 1, 3]", "shots: [0, 1]"))
    out = root / "sweep"
    argv = ["sweep", "--task", f"lm-eval:{task}", "--envelope", str(env), "--models", *MODELS, "--limit", "6"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    return root, argv, out


def _cells(folder) -> pd.DataFrame:
    g = pd.read_csv(folder / "grid.csv")
    return g.set_index(["model", "config_id"]).sort_index()[["score", "n_items", "parse_rate", "shots", "template"]]


def test_the_grid_and_analyze_give_rho_flip_and_orderings_as_the_items_do(swept, capsys):
    _, _, out = swept
    grid = pd.read_csv(out / "grid.csv")
    assert len(grid) == 16 and set(grid["model"]) == set(MODELS) and set(grid["benchmark"]) == {TASK}
    assert set(grid["n_items"]) == {6} and set(grid["scoring"]) == {"logprob"} and set(grid["shots"]) == {0, 1}
    # the template says what the run did: chat template off (+nochat), a system instruction (+sys=<its hash>)
    assert {t.split("+")[0] for t in grid["template"]} == {"task"} and grid["template"].nunique() == 4
    items = pd.read_parquet(out / "items.parquet")
    by_hand = items.groupby(["model", "config_id"])["item_score"].mean().unstack("model")
    assert len(by_hand) == 8
    scores = grid.pivot(index="config_id", columns="model", values="score").loc[by_hand.index]
    assert scores.to_numpy() == pytest.approx(by_hand[list(scores.columns)].to_numpy(), abs=1e-12)

    assert main(["analyze", str(out / "grid.csv"), "--out", str(out / "analysis")]) == 0
    capsys.readouterr()
    a, b = sorted(MODELS)
    diff = by_hand[a] - by_hand[b]
    n_plus, n_minus = int((diff > 0).sum()), int((diff < 0).sum())
    rho = pd.read_csv(out / "analysis" / "rho_flip.csv")
    row = rho[(rho["benchmark"] == TASK) & (rho["slice"] == "full")].iloc[0]
    assert (row["model_a"], row["model_b"]) == (a, b)
    assert (row["n_plus"], row["n_minus"], row["n_configs"]) == (n_plus, n_minus, 8)
    assert row["rho_flip"] == pytest.approx(min(n_plus, n_minus) / 8, abs=1e-12)
    strict = {tuple(sorted(MODELS, key=lambda m: -r[m])) for _, r in by_hand.iterrows() if r[a] != r[b]}
    orderings = pd.read_csv(out / "analysis" / "orderings.csv")
    got = orderings[(orderings["benchmark"] == TASK) & (orderings["slice"] == "full")].iloc[0]
    assert got["n_orderings"] == len(strict) and got["n_configs"] == 8


def test_a_rerun_asks_no_model_anything(swept, monkeypatch, capsys):
    _, argv, out = swept
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("results_*.json")}
    assert len(before) == 16

    def no_model(*_a, **_k):
        raise AssertionError("a finished sweep loaded a model")

    monkeypatch.setattr("safetyrepro.adapters.backends.factory.open_backend", no_model)
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert "16 cells (2 models x 8 configurations)" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("results_*.json")} == before


def test_a_sweep_killed_mid_way_resumes_to_the_same_grid(swept):
    root, argv, out = swept
    again = root / "killed"
    cmd = [sys.executable, "-m", "safetyrepro.cli", *argv, "--out", str(again), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and len(list((again / "runs").rglob("seed0"))) < 3:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = len(list((again / "runs").rglob("seed0")))
    assert 3 <= done < 16 and not (again / "grid.csv").exists()
    assert main([*argv, "--out", str(again), "--no-progress"]) == 0
    assert _cells(again).equals(_cells(out))
    assert not list(again.rglob(".*.part"))
    for x, y in itertools.pairwise(sorted((again / "runs").rglob("results_*.json"))):
        assert x.parent != y.parent  # one results file a run: nothing ran twice into one folder
