"""The price of anytime validity (issue 56): items certify's population sequences need to claim a lead of 0.35,
0.25 and 0.15 (and two identical models within a 0.05 margin), before and after issue 56's growth-rate stakes,
beside the fixed-n test with Holm at 80 % power and the growth-optimal bettor that knows the law. Not timed: a
table of item counts.

The scenarios are the audit's: one pair of models over K = 48 configurations at alpha 0.05 (certify's closed test
starts at alpha / (2K)); per seed, paired 0/1 answers that differ on a share D = 0.5 of items. "0/1 answers": one
seed (greedy decoding); the fixed-n test is the exact sign test (analysis/paired/power.py). "5-seed means": a
sampled configuration's item score is the mean of five seeds, the differences vary less (sd 0.31 at these leads);
the fixed-n test is the paired z-test, n = ((z_{1 - alpha/2K} + z_0.8) sd / lead)^2 with the lead's own sd (the
audit's 14, 28 and 82 took a null difference's, sd 0.32).
certify's numbers come from its own sequences on simulated answers (safetyrepro/sequential/planning.py, checked
against certify itself by tests/certify/test_plan_certify_56.py). "Kelly" is the median for a bettor that knows
the law and bets the growth-optimal constant stake: no betting e-process claims sooner on average, so where its
median is above 300 items, no stake decides the lead by 300 items in half the runs.

A second table gives the free-form items to the same leads with a log-probability twin correlated R (--twin,
default 0.8) and scored on items beyond the subset (`certify --control auto`), beside the same answers without it
and the least share any control could leave (plan --certify --twin R prints one row of it).

    python perf/certify_items_to_decision.py [--runs 400] [--configs 48] [--discordance 0.5] [--twin 0.8]
"""

from __future__ import annotations

import argparse

import numpy as np

from safetyrepro.analysis.paired.power import items_needed
from safetyrepro.sequential.planning import (
    controlled_items_to_decide,
    items_to_decide,
    kelly_items,
    least_twin_share,
    twin_share,
    z_items_needed,
)

LEADS = (0.35, 0.25, 0.15)
MARGIN = 0.05
MAX_ITEMS = 5000
SCENARIOS = (("0/1 answers", 1), ("5-seed means", 5))


def _n(x: float) -> str:
    return "never" if x == float("inf") else f"{int(x):,}"


def kelly_median(d: float, e: float, seeds: int, k: int, runs: int) -> float:
    """Median items to the claim for the bettor that knows the law (constant Kelly stake)."""
    return float(np.median(kelly_items(d, e, family=k, seeds=seeds, runs=runs, max_items=MAX_ITEMS).items))


def fixed_n(d: float, e: float, seeds: int, k: int) -> int | None:
    if seeds == 1:
        return items_needed(d, e, k, 0.05, 0.8).n_items
    return z_items_needed(d, e, seeds, k, 0.05, 0.8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--configs", type=int, default=48)
    ap.add_argument("--discordance", type=float, default=0.5)
    ap.add_argument("--twin", type=float, default=0.8)
    a = ap.parse_args()
    k, d = a.configs, a.discordance
    print(f"one pair over K = {k} configurations, alpha 0.05, discordance {d} per seed, {a.runs} simulated runs")
    print("certify: median / 80th percentile of items to the claim, share of runs within 300 items")
    head = f"{'scenario':<13} {'claim':<18} {'before (width)':>20} {'after (growth)':>20}"
    print(f"{head} {'fixed-n 80 %':>12} {'ratio':>11} {'Kelly':>6}")
    for name, seeds in SCENARIOS:
        for e in (*LEADS, 0.0):
            if e > d:  # a lead larger than the share of items the models differ on cannot happen
                continue
            margin = MARGIN if e == 0.0 else None
            common = dict(family=k, margin=margin, runs=a.runs, max_items=MAX_ITEMS, seeds=seeds)
            found = {st: items_to_decide(d, e, stakes=st, **common) for st in ("width", "growth")}
            cells = [
                f"{_n(f.quantile(0.5))} / {_n(f.quantile(0.8))} / {f.share_within(300):.2f}" for f in found.values()
            ]
            claim = f"lead {e:.2f}" if margin is None else f"within +-{MARGIN}"
            fixed = fixed_n(d, e, seeds, k) if margin is None else None
            ratios = "-"
            if fixed:  # the 80th percentiles over the fixed-n items: what stopping at any item costs
                before, after = (f.quantile(0.8) / fixed for f in found.values())
                ratios = f"{before:.2f} {after:.2f}"
            kelly = _n(kelly_median(d, e, seeds, k, a.runs)) if margin is None else "-"
            print(f"{name:<13} {claim:<18} {cells[0]:>20} {cells[1]:>20} {fixed or '-':>12} {ratios:>11} {kelly:>6}")
    twin_table(d, k, a.runs, a.twin)


def twin_table(d: float, k: int, runs: int, r: float) -> None:
    """Free-form items to each lead without and with a twin correlated r (the same simulated answers), the share
    (summed over runs that claim both ways) and the least share (growth_ceiling of the twin's law)."""
    print()
    print(f"with a log-probability twin correlated {r} and scored beyond the subset (certify --control auto):")
    print("free-form items, median / 80th percentile / share of runs within 300 items")
    print(f"{'scenario':<13} {'claim':<18} {'without the twin':>20} {'with the twin':>20} {'share':>6} {'least':>6}")
    for name, seeds in SCENARIOS:
        for e in LEADS:
            if e > d:
                continue
            found = controlled_items_to_decide(d, e, r, family=k, seeds=seeds, runs=runs, max_items=MAX_ITEMS)
            cells = [f"{_n(f.quantile(0.5))} / {_n(f.quantile(0.8))} / {f.share_within(300):.2f}" for f in found]
            share, _ = twin_share(*found)
            shown = "-" if share is None else f"{share:.2f}"
            least = least_twin_share(d, e, seeds, r)
            print(f"{name:<13} {'lead ' + f'{e:.2f}':<18} {cells[0]:>20} {cells[1]:>20} {shown:>6} {least:>6.2f}")


if __name__ == "__main__":
    main()
