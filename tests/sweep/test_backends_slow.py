"""The same model through SafetyRepro's engine and through lm-eval's own `hf` backend, in one sweep
(`--models smollm2 lm-eval:hf:pretrained=<exported folder>`): the grid holds both, a rerun does no
model work, logprob choices agree on every item (float32 weights on both sides: the two differ by
~1e-5 nats, so only an exact tie could part them), and free-form greedy labels agree on at least
95 % of items (the engine prefills long inputs chunk by chunk and HF in one forward pass; the
rounding differs in the last bits, which can move a long greedy reply; the differences are printed).
float32 rather than bf16: on CPUs without native bf16 (AVX2) it is the faster of the two."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def sweep(out: Path, models: list[str], *extra: str, cache: Path) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "safetyrepro.cli",
        "sweep",
        "--models",
        *models,
        "--no-progress",
        *extra,
        "--out",
        str(out),
    ]
    env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache), "TQDM_DISABLE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400)


def test_engine_and_lm_eval_hf_agree_and_rerun_is_free(tmp_path, smollm2_hf_folder_fp32, data_dir):
    cache = tmp_path / "cache"
    hf = f"lm-eval:hf:pretrained={smollm2_hf_folder_fp32},dtype=float32"
    out = tmp_path / "fp32"
    args = (
        "--precision",
        "fp32",
        "--benchmarks",
        "bbq",
        "xstest",
        "--templates",
        "T1",
        "T3",
        "--decodings",
        "greedy",
        "--shots",
        "0",
        "--limit",
        "8",
    )
    res = sweep(out, ["smollm2", hf], *args, cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    grid = pd.read_csv(out / "grid.csv")
    assert sorted(set(grid["model"])) == sorted(["smollm2", hf]) and len(grid) == 2 * 2 * 2 * 2
    assert (grid["status"] == "ok").all() and (grid["precision"] == "fp32").all()

    items = pd.read_parquet(out / "items.parquet")
    logprob = items[items["config_id"].str.endswith("/logprob")]
    choices = logprob.pivot_table(
        index=["config_id", "item_id", "seed"], columns="model", values="prediction", aggfunc="first"
    )
    same = choices["smollm2"] == choices[hf]
    print(f"\nlogprob, fp32: same choice on {int(same.sum())}/{len(same)} items")
    assert len(same) == 2 * 2 * 8 and same.all(), choices[~same]
    ll = logprob.pivot_table(index=["config_id", "item_id"], columns="model", values="logliks", aggfunc="first")
    gap = max(abs(a - b) for x, y in zip(ll["smollm2"], ll[hf]) for a, b in zip(x, y))
    print(f"largest log-likelihood difference: {gap:.2e} nats")
    assert gap < 1e-3
    scores = grid[grid["scoring"] == "logprob"].pivot(index="config_id", columns="model", values="score")
    assert (scores["smollm2"] - scores[hf]).abs().max() < 1e-9

    free = items[items["config_id"].str.endswith("/free_form")].assign(label=lambda d: d["prediction"].fillna(-1))
    wide = free.pivot_table(index=["config_id", "item_id"], columns="model", values="label", aggfunc="first")
    agree = (wide["smollm2"] == wide[hf]).mean()
    raw = free.pivot_table(index=["config_id", "item_id"], columns="model", values="raw_output", aggfunc="first")
    print(f"free-form greedy, fp32: parsed labels agree on {agree:.1%} of {len(wide)} items")
    for idx, row in raw[wide["smollm2"] != wide[hf]].iterrows():
        print("  differs:", idx, repr(row["smollm2"][:80]), "vs", repr(row[hf][:80]))
    assert len(wide) == 2 * 2 * 8 and agree >= 0.95

    before = (out / "grid.csv").read_bytes()
    again = sweep(out, ["smollm2", hf], *args, cache=cache)
    assert again.returncode == 0 and "no model work" in again.stdout
    assert (out / "grid.csv").read_bytes() == before
    run = __import__("json").loads((out / "run.json").read_text())
    backends = {m["label"]: m["backend"] for m in run["models"]}
    assert backends[hf]["kind"] == "lm-eval" and backends[hf]["precision"] == "fp32"
    assert backends[hf]["weights_sha256"] and backends["smollm2"]["kind"] == "engine"
    assert list(Path(out / "logs" / "lm-eval").rglob("results_*.json"))  # lm-eval's own artifacts, per cell
