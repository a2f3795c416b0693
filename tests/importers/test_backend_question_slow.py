"""Issue 57's backend question ("is this difference between HF and vLLM just noise?", lm-eval #2851, #3150),
answered on two real backends here: SmolLM2 through lm-eval's own `hf` backend (a float32 HF folder) and through
SafetyRepro's engine in bf16 (`--model safetyrepro`), both on lm-eval's `arc_easy` task read from a local file
(60 items, 0-shot, `--log_samples`). `verdict A B --margin 0.05` then says whether the two agree within 5 points;
every number is checked against the samples files. docs/backends.md shows the run's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "any_task"))
from make_fixtures import write_task  # noqa: E402
from tost_by_hand import tost_by_hand  # noqa: E402

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _lm_eval(out: Path, tasks: Path, model: str, model_args: str) -> Path:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    args = ["--tasks", "arc_easy_local", "--include_path", str(tasks), "--num_fewshot", "0", "--batch_size", "8"]
    cmd = [str(BIN / "lm_eval"), "--model", model, "--model_args", model_args, *args]
    res = subprocess.run([*cmd, "--output_path", str(out), "--log_samples"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _scores(folder: Path) -> dict[int, float]:
    (path,) = folder.rglob("samples_*.jsonl")
    return {r["doc_id"]: float(r["acc"]) for r in map(json.loads, path.read_text().splitlines())}


def test_hf_and_the_engine_in_bf16_agree_within_five_points_as_verdict_says(tmp_path, smollm2_hf_folder_fp32, capsys):
    from safetyrepro.cli import main

    tasks = write_task(tmp_path / "work")
    hf = _lm_eval(tmp_path / "hf", tasks, "hf", f"pretrained={smollm2_hf_folder_fp32},dtype=float32")
    engine = _lm_eval(tmp_path / "engine", tasks, "safetyrepro", "model=smollm2,precision=bf16")
    argv = ["verdict", str(hf), str(engine), "--labels", "hf-fp32", "engine-bf16", "--metric", "acc"]
    code = main([*argv, "--margin", "0.05", "--expect", "equivalent", "--json"])
    v = json.loads(capsys.readouterr().out)
    (row,) = v["comparisons"]
    a, b = _scores(hf), _scores(engine)
    assert sorted(a) == sorted(b) == list(range(60))
    d = np.array([a[i] - b[i] for i in range(60)])
    assert row["n_items"] == 60 and row["n_differing"] == int(np.count_nonzero(d))
    assert row["diff"] == pytest.approx(d.mean(), abs=1e-12)
    assert row["p_tost"] == pytest.approx(tost_by_hand(d, 0.05), rel=1e-9)
    assert bool(row["equivalent"]) == (row["p_tost_holm"] <= 0.05)
    assert code == v["gate"]["exit_code"] == {"pass": 0, "fail": 1, "inconclusive": 3}[v["gate"]["outcome"]]
    assert v["pairing"][0]["prompts_differ"] == 0 and v["pairing"][0]["changed"] == 0  # the same prompts
    for margin in ("0.05", "0.1"):  # what docs/backends.md shows
        assert main([*argv, "--margin", margin]) == 0
        shown = capsys.readouterr().out
        print(shown, file=sys.stderr)
        assert "A = hf-fp32, B = engine-bf16." in shown and f"within +-{float(margin):g}" in shown
