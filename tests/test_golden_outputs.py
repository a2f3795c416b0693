"""What a user reads stays byte for byte what it was (issue 55): a refactor moves code, not words.

The golden runs: `analyze` of the synthetic full-size grid (30 items a cell, run.json beside it) and of issue 52's
readings case, `verdict` of two committed lm-eval runs (plain, `--json`, `--gate`) and of the case's grid, `certify
--replay` of the case (strict and content readings), and `export eee` of the case. Every file they write (the
figures and report.html aside: report.md around matplotlib's pictures, whose bytes are not ours) and every line they
print is hashed (a Parquet file's table, not its bytes), the run's temporary folder written as <TMP>, the checkout
as <REPO>, a command's own seconds ("in 2.7 s", cost.json's seconds_evaluating) as <SECONDS> and the analysis
packages' versions as <VERSION>; tests/golden/outputs.json holds the hashes. A decimal number is read to 9
significant digits: its last digits move with the CPU's vector kernels (AVX-512's sums and AVX2's differ at
1e-16; OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL" gives an AVX2 machine's).

A change that means to change what users read regenerates the file and says so in its commit:
    SAFETYREPRO_REGEN_GOLDEN=1 pytest tests/test_golden_outputs.py
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "analysis"))
import readings_grid as case  # noqa: E402
from make_synthetic_grid import main as make_grid  # noqa: E402

from safetyrepro.cli import main  # noqa: E402

GOLDEN = HERE / "golden" / "outputs.json"
RUNS = HERE / "importers" / "fixtures" / "any_task" / "lm_eval"
SMOL, QWEN = RUNS / "smollm2", RUNS / "qwen2.5-coder-0.5b"
ANALYSIS_PACKAGES = ("numpy", "pandas", "scipy", "statsmodels", "lightgbm", "shap", "matplotlib")
DECIMAL = re.compile(rb"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")
SKIP_SUFFIXES = (".png", ".svg", ".pdf", ".html")  # rendered by matplotlib / a browser's page around our text


def _digest(text: bytes, tmp: Path) -> str:
    text = text.replace(str(tmp).encode(), b"<TMP>").replace(str(REPO).encode(), b"<REPO>")
    text = re.sub(rb" in \d+(\.\d+)? s\b", b" in <SECONDS> s", text)
    text = DECIMAL.sub(lambda m: b"%.9g" % float(m.group()), text)
    text = re.sub(rb'("seconds_[a-z_]+": )[0-9.e-]+', rb"\1<SECONDS>", text)  # cost.json's measured seconds
    for name in ANALYSIS_PACKAGES:  # the card's "Analysis: numpy 2.4.6, ..." and its JSON twin: CI installs anew
        version = re.escape(importlib.metadata.version(name).encode())
        text = re.sub(rb"(\b" + name.encode() + rb'"?:? "?)' + version, rb"\1<VERSION>", text)
    return hashlib.sha256(text).hexdigest()


def _run(capsys, tmp: Path, argv: list[str]) -> dict[str, str]:
    capsys.readouterr()
    code = main(argv)
    printed = capsys.readouterr()
    return {"exit": str(code), "stdout": _digest(printed.out.encode(), tmp)}


def _content(path: Path) -> bytes:
    """A file's bytes; a Parquet file's table as CSV: its bytes carry the writer's version and compression."""
    if path.suffix != ".parquet":
        return path.read_bytes()
    return pd.read_parquet(path).to_csv(index=False).encode()


def _files(folder: Path, tmp: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): _digest(_content(p), tmp)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix not in SKIP_SUFFIXES
    }


def _outputs(tmp: Path, capsys) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    synthetic = tmp / "synthetic"
    assert make_grid([str(synthetic), "--items", "30", "--run-json"]) == 0
    grid, items = case.write_case(tmp / "case")
    runs = {
        "analyze synthetic": ["analyze", str(synthetic / "grid.csv"), "--out", str(tmp / "a1"), "--no-figures"],
        "analyze case": ["analyze", str(grid), "--out", str(tmp / "a2"), "--no-figures"],
        "verdict runs": ["verdict", str(SMOL), str(QWEN)],
        "verdict runs json": ["verdict", str(SMOL), str(QWEN), "--json"],
        "verdict runs gate": ["verdict", str(QWEN), str(SMOL), "--gate"],
        "verdict grid": ["verdict", case.A, case.B, "--grid", str(grid)],
        "certify strict": [
            *("certify", "--replay", str(items), "--grid", str(grid), "--target", "subset", "--seed", "0"),
            *("--out", str(tmp / "c1"), "--quiet"),
        ],
        "certify content": [
            *("certify", "--replay", str(items), "--grid", str(grid), "--target", "subset", "--seed", "0"),
            *("--out", str(tmp / "c2"), "--quiet", "--reading", "content"),
        ],
        "export eee": ["export", "eee", str(grid), "--out", str(tmp / "e"), "--timestamp", "1767225600"],
    }
    folders = {"analyze synthetic": "a1", "analyze case": "a2", "certify strict": "c1", "certify content": "c2"}
    folders["export eee"] = "e"
    for name, argv in runs.items():
        out[name] = _run(capsys, tmp, argv)
        if name in folders:
            out[name] |= _files(tmp / folders[name], tmp)
    return out


def test_what_users_read_is_unchanged(tmp_path, capsys, data_dir):
    got = _outputs(tmp_path, capsys)
    if os.environ.get("SAFETYREPRO_REGEN_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    changed = [
        f"{run}: {key}"
        for run in sorted(set(want) | set(got))
        for key in sorted(set(want.get(run, {})) | set(got.get(run, {})))
        if want.get(run, {}).get(key) != got.get(run, {}).get(key)
    ]
    assert changed == [], "outputs changed (regenerate only if meant: see the module's docstring)"
    assert got["verdict runs gate"]["exit"] == "0" and got["verdict grid"]["exit"] == "0"
