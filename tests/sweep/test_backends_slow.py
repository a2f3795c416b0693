"""The same model through SafetyRepro's engine and through lm-eval's own `hf` backend, in one sweep
(`--models smollm2 lm-eval:hf:pretrained=<exported folder>`): the grid holds both, a rerun does no
model work, logprob choices agree on every item (float32 weights on both sides: the two differ by
~1e-5 nats, so only an exact tie could part them), free-form greedy labels on at least 95 % of items (bf16: the engine's
chunked prefill and HF's one-shot forward round differently, which can move a long greedy reply)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow


def sweep(out: Path, models: list[str], *extra: str, cache: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "safetyrepro.cli", "sweep", "--models", *models, "--no-progress", *extra,
           "--out", str(out)]
    env = {**os.environ, "SAFETYREPRO_CACHE_DIR": str(cache), "TQDM_DISABLE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400)


def _choices(out: Path) -> pd.DataFrame:
    items = pd.read_parquet(out / "items.parquet")
    return items.pivot_table(index=["config_id", "item_id", "seed"], columns="model", values="prediction",
                             aggfunc="first")


def test_engine_and_lm_eval_hf_agree_and_rerun_is_free(tmp_path, smollm2_hf_folder, smollm2_hf_folder_fp32,
                                                       data_dir):
    cache = tmp_path / "cache"
    hf = f"lm-eval:hf:pretrained={smollm2_hf_folder_fp32},dtype=float32"
    out = tmp_path / "fp32"
    res = sweep(out, ["smollm2", hf], "--precision", "fp32", "--benchmarks", "bbq", "toxigen", "--scoring", "logprob",
                "--templates", "T1", "T3", "--decodings", "greedy", "--shots", "0", "--limit", "12", cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    grid = pd.read_csv(out / "grid.csv")
    assert sorted(set(grid["model"])) == sorted(["smollm2", hf]) and len(grid) == 2 * 4
    assert (grid["status"] == "ok").all() and (grid["precision"] == "fp32").all()
    choices = _choices(out)
    same = choices["smollm2"] == choices[hf]
    print(f"\nlogprob, fp32: same choice on {int(same.sum())}/{len(same)} items")
    assert same.all(), choices[~same]
    items = pd.read_parquet(out / "items.parquet")
    ll = items.pivot_table(index=["config_id", "item_id"], columns="model", values="logliks", aggfunc="first")
    gap = max(abs(a - b) for x, y in zip(ll["smollm2"], ll[hf]) for a, b in zip(x, y))
    print(f"largest log-likelihood difference: {gap:.2e} nats")
    assert gap < 1e-3
    scores = grid.pivot(index="config_id", columns="model", values="score")
    assert (scores["smollm2"] - scores[hf]).abs().max() < 1e-9

    before = (out / "grid.csv").read_bytes()
    again = sweep(out, ["smollm2", hf], "--precision", "fp32", "--benchmarks", "bbq", "toxigen", "--scoring", "logprob",
                  "--templates", "T1", "T3", "--decodings", "greedy", "--shots", "0", "--limit", "12", cache=cache)
    assert again.returncode == 0 and "no model work" in again.stdout
    assert (out / "grid.csv").read_bytes() == before
    run = __import__("json").loads((out / "run.json").read_text())
    backends = {m["label"]: m["backend"] for m in run["models"]}
    assert backends[hf]["kind"] == "lm-eval" and backends[hf]["precision"] == "fp32"
    assert backends[hf]["weights_sha256"] and backends["smollm2"]["kind"] == "engine"
    assert list(Path(out / "logs" / "lm-eval").rglob("results_*.json"))  # lm-eval's own artifacts, per cell

    out16 = tmp_path / "bf16"
    hf16 = f"lm-eval:hf:pretrained={smollm2_hf_folder}"
    res = sweep(out16, ["smollm2", hf16], "--benchmarks", "bbq", "xstest", "--scoring", "free_form", "--templates",
                "T1", "T3", "--decodings", "greedy", "--shots", "0", "--limit", "12", cache=cache)
    assert res.returncode == 0, res.stderr[-3000:]
    items = pd.read_parquet(out16 / "items.parquet").assign(label=lambda d: d["prediction"].fillna(-1))
    wide = items.pivot_table(index=["config_id", "item_id"], columns="model", values="label", aggfunc="first")
    agree = (wide["smollm2"] == wide[hf16]).mean()
    raw = items.pivot_table(index=["config_id", "item_id"], columns="model", values="raw_output", aggfunc="first")
    differ = raw[wide["smollm2"] != wide[hf16]]
    print(f"free-form greedy, bf16: parsed labels agree on {agree:.1%} of {len(wide)} items")
    for idx, row in differ.iterrows():
        print("  differs:", idx, repr(row["smollm2"][:80]), "vs", repr(row[hf16][:80]))
    assert agree >= 0.95
