"""`plan --certify` (issue 56): the items certify's population sequences need to claim a lead, simulated on the very
sequences certify runs, agree with certify itself run on synthetic pairs of models with that lead (checked against
simulation), and stand beside the fixed-n test's items for the same power."""

from __future__ import annotations

import json

import numpy as np

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.cli import main
from safetyrepro.sequential.planning import items_to_decide

D, E, POOL, RUNS = 0.6, 0.35, 1000, 60


def _certified_items(seed: int) -> int:
    """One certify run (population target, one configuration, items one at a time) on two models whose answers
    differ on a share D of items, A's way on (D + E) / 2: the items it used to claim A's lead."""
    rng = np.random.default_rng(seed)
    u = rng.random(POOL)
    a = np.where(u < (D + E) / 2, 1.0, np.where(u < D, 0.0, (u > (1 + D) / 2).astype(float)))
    b = np.where(u < (D + E) / 2, 0.0, np.where(u < D, 1.0, a))
    ids = tuple(f"i{k}" for k in range(POOL))
    scores = {"a": dict(zip(ids, a)), "b": dict(zip(ids, b))}
    problem = BenchmarkProblem("my_task", ("c",), ("a", "b"), ids, 1, ideal=None)
    result = certify(
        [problem], lambda bm, c, m, items: np.array([scores[m][i] for i in items]), CertifyOptions(batch=1, seed=seed)
    )
    (claim,) = result.claims
    assert claim.claim == "a_better"
    return claim.items_used


def test_the_planned_items_agree_with_certify_run_on_that_lead():
    planned = items_to_decide(D, E, family=1, runs=400, max_items=POOL)
    measured = np.array([_certified_items(seed) for seed in range(RUNS)])
    assert abs(np.median(measured) / planned.quantile(0.5) - 1) < 0.2, (np.median(measured), planned.quantile(0.5))
    assert abs(np.quantile(measured, 0.8) / planned.quantile(0.8) - 1) < 0.25


def test_plan_certify_prints_its_items_beside_the_fixed_n_test(capsys):
    argv = ["plan", "--certify", "--discordance", "0.6", "--configs", "48", "--effect", "0.25", "--items", "300"]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    lead, flip = r["certify"]["lead"], r["certify"]["flip"]
    assert r["items_needed"] == 164  # the fixed-n exact sign test with Holm at 80 % power
    assert 140 <= lead["median"] <= 200 and lead["p80"] > r["items_needed"]  # anytime validity has a price
    assert flip["median"] > lead["median"] and 0 < lead["share_within_items"] <= 1
    assert main(argv) == 0
    assert "the fixed-n test above needs 164 items for 80 % power" in capsys.readouterr().out
