"""The price of anytime validity (issue 56): items certify's population sequences need to claim a lead of 0.35,
0.25 and 0.15 (and two identical models within a 0.05 margin), beside the items the fixed-n exact sign test with
Holm needs for 80 % power on the same scenario, and their ratio. Not timed: a table of item counts.

The scenario is the audit's: one pair of models over K = 48 configurations at alpha 0.05 (certify's closed test
starts at alpha / (2K)), paired 0/1 answers that differ on a share D = 0.5 of items. certify's numbers come from
its own sequences on simulated answers (safetyrepro/sequential/planning.py, checked against certify itself by
tests/certify/test_plan_certify_56.py); the fixed-n numbers from analysis/paired/power.py. This is the "before"
of issue 56's stakes: a changed stake is judged by this table, rerun.

    python perf/certify_items_to_decision.py [--runs 400] [--configs 48] [--discordance 0.5]
"""

from __future__ import annotations

import argparse

from safetyrepro.analysis.paired.power import items_needed
from safetyrepro.sequential.planning import items_to_decide

LEADS = (0.35, 0.25, 0.15)
MARGIN = 0.05
MAX_ITEMS = 5000


def _n(x: float) -> str:
    return "never" if x == float("inf") else f"{int(x):,}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--configs", type=int, default=48)
    ap.add_argument("--discordance", type=float, default=0.5)
    a = ap.parse_args()
    k, d = a.configs, a.discordance
    print(f"one pair over K = {k} configurations, alpha 0.05, discordance {d}, {a.runs} simulated runs")
    head = f"{'claim':<28} {'certify median':>15} {'certify 80 %':>13} {'within 300':>11}"
    print(f"{head} {'fixed-n 80 %':>13} {'ratio':>6}")
    for e in LEADS:
        found = items_to_decide(d, e, family=k, runs=a.runs, max_items=MAX_ITEMS)
        fixed = items_needed(d, e, k, 0.05, 0.8).n_items
        p80 = found.quantile(0.8)
        ratio = f"{p80 / fixed:.2f}" if fixed and p80 != float("inf") else "-"
        print(
            f"{f'lead {e:.2f}':<28} {_n(found.quantile(0.5)):>15} {_n(p80):>13} "
            f"{found.share_within(300):>11.2f} {fixed or '-':>13} {ratio:>6}"
        )
    within = items_to_decide(d, 0.0, family=k, margin=MARGIN, runs=a.runs, max_items=MAX_ITEMS)
    print(
        f"{f'within +-{MARGIN} (identical)':<28} {_n(within.quantile(0.5)):>15} {_n(within.quantile(0.8)):>13} "
        f"{within.share_within(300):>11.2f} {'-':>13} {'-':>6}"
    )


if __name__ == "__main__":
    main()
