"""How many CrowS-Pairs claims certify makes on 1,000 items, with the paired sign test (issue 56) and with the two
shares' sequences alone (before it). An audit found 13 of 120 configurations decided there; both models answer
the same items, and the shares' sequences do not use it.

Five synthetic models on CrowS-Pairs' 12 configurations (10 pairs: K = 120 claims), 1,000 items each, alpha 0.05,
population target, uniform rounds until every claim is made or the items run out. Answers are 0/1 "the stereotyped
sentence wins"; each configuration shifts every share by one draw of +-0.03, and on a share `rho` of items every
model reads one common draw (they agree where their shares allow), elsewhere each its own. The sign nulls' e-values
are read three ways: "shares" (the two shares' cell boxes, the code before), "paired" (what certify runs now) and
"mean" (the average of the two, as valid and at most a factor 2 off either).

    python perf/certify_crows_paired.py [--items 1000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "certify"))
from test_crows_paired_56 import crows_grid, paired_answers  # noqa: E402

from safetyrepro.certify.algorithm import CertifyOptions, certify  # noqa: E402
from safetyrepro.sequential.evidence import PairedEvidence  # noqa: E402

SCENARIOS = {  # name -> (the five models' shares, rho)
    "shares 0.52-0.76, rho 0.6": ((0.52, 0.58, 0.64, 0.70, 0.76), 0.6),
    "shares 0.52-0.76, independent": ((0.52, 0.58, 0.64, 0.70, 0.76), 0.0),
    "shares 0.55-0.68, rho 0.8": ((0.55, 0.58, 0.62, 0.65, 0.68), 0.8),
    "both sides of 0.5, rho 0.6": ((0.40, 0.46, 0.55, 0.62, 0.70), 0.6),
}


def agreement(problem, scores) -> float:
    """The share of items on which the farthest-apart models (m0, m4) answer alike, over the configurations."""
    return float(
        np.mean([[scores[(c, "m0")][i] == scores[(c, "m4")][i] for i in problem.item_ids] for c in problem.config_ids])
    )


PAIRED = PairedEvidence._sign_log_e  # kept apart: a mode patches the class's
SIGN_E = {  # the sign nulls' (NOT_A, NOT_B) log e-values each mode reads
    "shares": lambda ev: ev._share_log_e()[:, :2],  # the shares' cell boxes: the code before issue 56
    "paired": PAIRED,  # what certify runs now
    "mean": lambda ev: np.logaddexp(PAIRED(ev), ev._share_log_e()[:, :2]) - np.log(2.0),  # valid too, not chosen
}


def decided(problem, oracle, mode: str) -> tuple[int, int]:
    """(claims made, items a claim used on average) of one certify run, its sign nulls read as `mode` says."""
    options = CertifyOptions(alpha=0.05, delta=0.05, allocation="uniform", seed=0)
    with mock.patch.object(PairedEvidence, "_sign_log_e", SIGN_E[mode]):
        result = certify([problem], oracle, options)
    made = sum(c.claim != "undecided" for c in result.claims)
    return made, round(float(np.mean([c.items_used for c in result.claims])))


def items_to_claim(streams: int = 40, items: int = 6000, K: int = 120, alpha: float = 0.05) -> dict[str, float]:
    """Median items to "a is closer" for a at 0.55, b at 0.68 agreeing on 80 % of items, at a K-claim family's first
    step, by the paired e-value, the shares', and the mean of the two (the latter two read every 50 items)."""
    a, b = paired_answers(np.random.default_rng(0), streams, items, 0.55, 0.68, 0.8)
    ev = PairedEvidence(0.5, streams, items, "population", alpha / K / 2, 0.05, None)
    threshold = np.log(2 * K / alpha)
    first = {k: np.full(streams, np.inf) for k in ("paired", "shares", "mean")}
    for t in range(items):
        ev.update(np.arange(streams), a[:, t], b[:, t])
        log_e = {"paired": ev._sign_log_e()[:, 0]}
        if (t + 1) % 50 == 0:
            log_e["shares"] = ev._share_log_e()[:, 0]
            log_e["mean"] = np.logaddexp(log_e["paired"], log_e["shares"]) - np.log(2.0)
        for k, v in log_e.items():
            first[k] = np.where(np.isinf(first[k]) & (v >= threshold), t + 1, first[k])
    return {k: float(np.median(v)) for k, v in first.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args()
    print(f"K = 120 claims (10 pairs x 12 configurations), alpha 0.05, delta 0.05, {args.items} items, uniform rounds")
    head = f"{'scenario':<32} {'agree(m0,m4)':>12} {'shares':>7} {'paired':>7} {'mean':>5}"
    print(f"{head}  items a claim used (same order)")
    for name, (shares, rho) in SCENARIOS.items():
        problem, oracle, scores = crows_grid(shares, rho, args.items)
        runs = [decided(problem, oracle, mode) for mode in SIGN_E]
        made = " ".join(f"{m:>{w}}" for (m, _), w in zip(runs, (7, 7, 5), strict=True))
        print(f"{name:<32} {agreement(problem, scores):>12.2f} {made}  {' / '.join(str(u) for _, u in runs)}")
    print("one claim: a 0.55 vs b 0.68, 80 % agreement, K 120, median items to it:")
    print(", ".join(f"{k} {v:.0f}" for k, v in items_to_claim().items()))


if __name__ == "__main__":
    main()
