"""What certification saves, and what its allocation rule buys (a measurement, not a test):

    python perf/certify_allocation.py                 # 20 synthetic grids per scenario, 300 items, 48 configurations
    python perf/certify_allocation.py --grids 5 --items 100

Per scenario (one model far ahead everywhere; the lead reversing between templates; a small lead of
5 points; identical models), the paired evaluations certification spent until its verdict, as a share of
the full grid's (the obvious alternative: evaluate every configuration on every item, as a sweep does),
for the reversal-first allocation and for uniform allocation (every open configuration the same batch
each round), with the verdicts reached and whether any claim contradicted the full subset. Both rules
share the confidence sequences and the stopping rules; only where each round spends differs. Grids are
built as a sweep builds them (tests/certify/certify_grids.py): 0/1 answers per item and seed, correlated
through a shared item difficulty.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "certify"))

from certify_grids import synthetic_run  # noqa: E402

from safetyrepro.analysis.grid_io import common_configurations, validate_cells  # noqa: E402
from safetyrepro.certify.algorithm import CertifyOptions, certify  # noqa: E402
from safetyrepro.certify.replay import contradicted, load_replay  # noqa: E402
from safetyrepro.tasks.envelope import default_rules  # noqa: E402

SCENARIOS = {
    "far ahead (0.80 vs 0.35)": lambda cfg, m: 0.8 if m == "a" else 0.35,
    "reverses with template": lambda cfg, m: (0.75 if m == "a" else 0.4) if cfg.template in ("T1", "T2")
    else (0.4 if m == "a" else 0.75),
    "small lead (0.60 vs 0.55)": lambda cfg, m: 0.6 if m == "a" else 0.55,
    "identical (0.55)": lambda cfg, m: 0.55,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=20)
    ap.add_argument("--items", type=int, default=300)
    args = ap.parse_args()
    rules = default_rules()
    print(f"{'scenario':<28} {'allocation':<15} {'share of full':>13} {'verdicts':<32} {'contradicted':>12} {'s/grid':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, acc in SCENARIOS.items():
            runs = []
            for k in range(args.grids):
                grid, items = synthetic_run(np.random.default_rng(k), acc, args.items)
                g = common_configurations(validate_cells(grid, rules, "synthetic"), "synthetic", rules)
                path = Path(tmp) / "items.parquet"
                items.to_parquet(path)
                runs.append(load_replay(path, g))
            for allocation in ("reversal_first", "uniform"):
                shares, verdicts, bad, t0 = [], Counter(), 0, time.perf_counter()
                for k, replay in enumerate(runs):
                    r = certify(replay.problems, replay.oracle, CertifyOptions(seed=k, allocation=allocation))
                    shares.append(r.paired_evaluations / r.full_paired_evaluations)
                    verdicts.update(p.verdict for p in r.pairs)
                    bad += any(contradicted(c.claim, replay.full_delta[(c.benchmark, c.config_id, c.model_a,
                                                                        c.model_b)], 0.05) for c in r.claims)
                seconds = (time.perf_counter() - t0) / len(runs)
                said = ", ".join(f"{v} {n}" for v, n in verdicts.most_common())
                print(f"{name:<28} {allocation:<15} {np.mean(shares):>12.1%} {said:<32} {bad:>12} {seconds:>7.2f}")


if __name__ == "__main__":
    main()
