"""What certification saves, and what its allocation rule buys (a measurement, not a test):

    python perf/certify_allocation.py                 # 20 synthetic grids per scenario, 300 items, 48 configurations
    python perf/certify_allocation.py --grids 5 --items 100

Per scenario (one model far ahead everywhere; the lead reversing between templates; a small lead of
5 points; identical models), the paired evaluations certification spent until its verdict, as a share of
the full grid's (the obvious alternative: evaluate every configuration on every item, as a sweep does),
and the model time it spent as a share of the full grid's, with what an item costs as measured on this
project's CPU in proportion (a log-probability item 0.1, a greedy free-form one 1, a sampled one 5: five
seeds; docs/measured.md): for the reversal-first allocation with cost-aware rounds as a live run makes
them (cheapest expected answer first, rounds capped at 60 units), the same without costs (a replay's),
and uniform allocation (every open configuration the same batch each round), with the verdicts reached
and whether any claim contradicted the full subset. All share the confidence sequences and the
stopping rules; only where each round spends differs. Grids are
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
from safetyrepro.certify.oracle import Oracle  # noqa: E402
from safetyrepro.certify.replay import contradicted, load_replay  # noqa: E402
from safetyrepro.tasks.envelope import default_rules  # noqa: E402

SCENARIOS = {
    "far ahead (0.80 vs 0.35)": lambda cfg, m: 0.8 if m == "a" else 0.35,
    "reverses with template": lambda cfg, m: (
        (0.75 if m == "a" else 0.4) if cfg.template in ("T1", "T2") else (0.4 if m == "a" else 0.75)
    ),
    "small lead (0.60 vs 0.55)": lambda cfg, m: 0.6 if m == "a" else 0.55,
    "identical (0.55)": lambda cfg, m: 0.55,
}


def item_cost(config_id: str) -> float:
    """Model time of one item of one model, in proportion to what this CPU measured (docs/measured.md)."""
    if config_id.endswith("/logprob"):
        return 0.1
    return 1.0 if "/greedy/" in config_id else 5.0  # five seeds


class Costed(Oracle):
    """A replay's oracle that adds up the model time of what it is asked; with `known`, it tells the
    allocation what an item costs (as a live run's oracle does)."""

    def __init__(self, oracle, known: bool):
        self.oracle, self.spent, self.known = oracle, 0.0, known

    def cost(self, benchmark, config_id, model):
        return item_cost(config_id) if self.known else None

    def __call__(self, benchmark, config_id, model, item_ids):
        self.spent += item_cost(config_id) * len(item_ids)
        return self.oracle(benchmark, config_id, model, item_ids)


def full_cost(problems) -> float:
    return sum(item_cost(c) * len(p.item_ids) * len(p.models) for p in problems for c in p.config_ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=20)
    ap.add_argument("--items", type=int, default=300)
    args = ap.parse_args()
    rules = default_rules()
    print(
        f"{'scenario':<28} {'allocation':<15} {'evaluations':>12} {'model time':>12} {'verdicts':<32} "
        f"{'contradicted':>12} {'s/grid':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, acc in SCENARIOS.items():
            runs = []
            for k in range(args.grids):
                grid, items = synthetic_run(np.random.default_rng(k), acc, args.items)
                g = common_configurations(validate_cells(grid, rules, "synthetic"), "synthetic", rules)
                path = Path(tmp) / "items.parquet"
                items.to_parquet(path)
                runs.append(load_replay(path, g))
            for label, allocation, costed in (
                ("cost-aware", "reversal_first", True),
                ("reversal_first", "reversal_first", False),
                ("uniform", "uniform", False),
            ):
                shares, spent, verdicts, bad, t0 = [], [], Counter(), 0, time.perf_counter()
                for k, replay in enumerate(runs):
                    oracle = Costed(replay.oracle, costed)
                    r = certify(
                        replay.problems,
                        oracle,
                        CertifyOptions(seed=k, allocation=allocation, round_seconds=60.0 if costed else None),
                    )
                    shares.append(r.paired_evaluations / r.full_paired_evaluations)
                    spent.append(oracle.spent / full_cost(replay.problems))
                    verdicts.update(p.verdict for p in r.pairs)
                    bad += any(
                        contradicted(c.claim, replay.full_delta[(c.benchmark, c.config_id, c.model_a, c.model_b)], 0.05)
                        for c in r.claims
                    )
                seconds = (time.perf_counter() - t0) / len(runs)
                said = ", ".join(f"{v} {n}" for v, n in verdicts.most_common())
                print(
                    f"{name:<28} {label:<15} {np.mean(shares):>12.1%} {np.mean(spent):>12.1%} {said:<32} {bad:>12} "
                    f"{seconds:>7.2f}"
                )


if __name__ == "__main__":
    main()
