"""How many more claims the closed test makes than the union bound, at the same evaluations (issue 39).

Both read the same anytime p-values (population target); only the familywise step differs: Bonferroni at
alpha / (2 x family) per one-sided hypothesis (what the union bound over two-sided sequences spends) or the
closed test of sequential/closed_testing.py. Three sources:
- synthetic 300-item grids (TruthfulQA's 48 configurations, two models), uniform rounds cut at a fixed
  budget so both procedures see the same items;
- the 24-item study's records (study), replayed to the end (every item read by both);
- the certified study's records (study/certified), re-read with --held-only (no model runs).

    python perf/certify_power.py [--grids 20] [--skip-published]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "certify"))
from certify_grids import synthetic_problem  # noqa: E402

from safetyrepro.certify.algorithm import CertifyOptions, certify  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {  # name -> (accuracy(cfg, model), delta)
    "small lead everywhere (0.62 vs 0.55)": (lambda cfg, m: 0.62 if m == "a" else 0.55, 0.05),
    "small lead, delta 0.2 (0.62 vs 0.55)": (lambda cfg, m: 0.62 if m == "a" else 0.55, 0.2),
    "lead reverses with template": (
        lambda cfg, m: (0.68 if m == "a" else 0.55) if cfg.template in ("T1", "T2") else (0.55 if m == "a" else 0.68),
        0.05,
    ),
    "identical (0.6)": (lambda cfg, m: 0.6, 0.05),
}


def synthetic(grids: int) -> list[str]:
    lines = [f"{'scenario':<38} {'budget':>7} {'bonferroni':>11} {'closed':>7}  (claims, summed over grids)"]
    for name, (acc, delta) in SCENARIOS.items():
        for budget in (3000, 8000, 14400):
            counts = {}
            for fw in ("bonferroni", "closed"):
                total = 0
                for g in range(grids):
                    problem, oracle, _ = synthetic_problem(np.random.default_rng(100 + g), acc)
                    o = CertifyOptions(
                        allocation="uniform", budget_evaluations=budget, familywise=fw, seed=g, delta=delta
                    )
                    total += sum(c.claim != "undecided" for c in certify([problem], oracle, o).claims)
                counts[fw] = total
            lines.append(f"{name:<38} {budget:>7} {counts['bonferroni']:>11} {counts['closed']:>7}")
    return lines


def published() -> list[str]:
    lines = []
    sr = [sys.executable, "-m", "safetyrepro.cli"]
    runs = {
        "24-item study, replayed": ["certify", "--replay", "study/items.parquet", "--grid", "study/grid.csv"],
        "certified study, re-read": [
            "certify",
            "--models",
            "smollm2",
            "gemma3-270m",
            "qwen2.5-coder-0.5b",
            "--tier",
            "full",
            "--precision",
            "fp32",
            "--order",
            "subset",
            "--records",
            "study",
            "study/certified",
            "--held-only",
        ],
    }
    for name, args in runs.items():
        counts = {}
        for fw in ("bonferroni", "closed"):
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run(
                    [*sr, *args, "--familywise", fw, "--quiet", "--out", tmp], cwd=ROOT, check=True, capture_output=True
                )
                claims = pd.read_csv(Path(tmp) / "claims.csv")
                counts[fw] = int((claims["claim"] != "undecided").sum())
        lines.append(
            f"{name:<38} bonferroni {counts['bonferroni']:>4}  closed {counts['closed']:>4}  of {len(claims)} claims"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=20)
    ap.add_argument("--skip-published", action="store_true")
    a = ap.parse_args()
    for line in synthetic(a.grids):
        print(line, flush=True)
    if not a.skip_published:
        for line in published():
            print(line, flush=True)


if __name__ == "__main__":
    main()
