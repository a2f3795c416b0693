"""certify's default target, the population (issue 39): claims about the models that another draw of items
would confirm, read in each benchmark's direction, valid for configurations chosen by looking at data.

Worlds are built as the synthetic sweep grids are (certify_grids.py): items share a difficulty drawn from a
normal law, so the law's true difference per configuration is an integral worked out here by quadrature,
and a claim is false when that law contradicts it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from certify_grids import synthetic_problem
from scipy.stats import beta

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.sequential.closed_testing import closed_test
from safetyrepro.tasks.envelope import default_rules

RULES = default_rules()
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(80)
WEIGHTS = WEIGHTS / WEIGHTS.sum()
OPTIONS = CertifyOptions(alpha=0.05, delta=0.05, seed=0, target="population")


def law_mean(p: float) -> float:
    """E over the item difficulty z ~ N(0, 1) of the chance of a correct answer, logit(p) - 0.8 z."""
    logit = np.log(p / (1 - p)) - 0.8 * NODES
    return float((WEIGHTS / (1 + np.exp(-logit))).sum())


def identical(cfg, model):
    return 0.6


def half_null(cfg, model):  # a ahead on T1/T2, the two identical on T3/T4: no reversal anywhere
    return (0.75 if model == "a" else 0.55) if cfg.template in ("T1", "T2") else 0.6


def contradicted(claim: str, theta: float, delta: float) -> bool:
    return {"a_better": theta <= 0, "b_better": theta >= 0, "within_delta": abs(theta) >= delta}.get(claim, False)


def upper_share(k: int, n: int, level: float = 0.95) -> float:
    """Clopper-Pearson: the lower end of the two-sided interval for a share k of n."""
    return float(beta.ppf((1 - level) / 2, k, n - k + 1)) if k else 0.0


def _world(seed: int, accuracy, templates=("T1", "T2", "T3", "T4")):
    problem, oracle, _ = synthetic_problem(np.random.default_rng(seed), accuracy)
    configs = tuple(c for c in problem.config_ids if c.split("/")[1] in templates)
    law = {
        cfg.config_id: law_mean(accuracy(cfg, "a")) - law_mean(accuracy(cfg, "b"))
        for cfg in RULES.configs("truthfulqa")
    }
    return dataclasses.replace(problem, config_ids=configs), oracle, law


def test_identical_models_make_no_claim_the_subset_target_would_make():
    """The audit's case: two identical models differ on 300 items by chance, so the subset target (exact once
    every item is in) certifies a sign somewhere; the population target keeps 0 inside every bound."""
    problem, oracle, law = _world(3, identical)
    pop = certify([problem], oracle, OPTIONS)
    sub = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.05, seed=0, target="subset"))
    assert all(v == 0 for v in law.values())
    assert {c.claim for c in pop.claims} <= {"undecided", "within_delta"}
    assert all(c.lower <= 0 <= c.upper for c in pop.claims)
    assert pop.pairs[0].verdict != "flip" and sub.pairs[0].verdict == "flip"


@pytest.mark.slow
def test_claims_against_the_law_are_at_most_alpha_of_200_null_and_half_null_grids():
    """Issue 39's acceptance: over 200 grids at 300 items (100 identical, 100 identical on T3 and one-sided
    on T1), the share of grids with any claim the law contradicts, and of grids that end `flip`, is at most
    alpha by the binomial interval. Templates T1 and T3 (24 configurations, greedy and 5-seed sampled ones,
    both scorings) keep the run short; the guarantee does not depend on the family's size."""
    wrong = flips = 0
    n = 200
    for seed in range(n):
        accuracy = identical if seed % 2 == 0 else half_null
        problem, oracle, law = _world(1000 + seed, accuracy, templates=("T1", "T3"))
        result = certify([problem], oracle, OPTIONS)
        wrong += any(contradicted(c.claim, law[c.config_id], OPTIONS.delta) for c in result.claims)
        flips += result.pairs[0].verdict == "flip"
    assert upper_share(wrong, n) <= OPTIONS.alpha, f"{wrong} of {n} grids with a false claim"
    assert upper_share(flips, n) <= OPTIONS.alpha, f"{flips} of {n} no-flip grids ended flip"


def test_closed_test_rejects_at_least_what_the_union_bound_rejects():
    """Never less powerful: every p-value at or under alpha / (2K) is rejected, and with many small p-values
    the step-down rejects more than the union bound does."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = int(rng.integers(1, 30))
        p = np.where(rng.random((k, 4)) < 0.4, rng.random((k, 4)) * 0.01, rng.random((k, 4)))
        assert closed_test(p, 0.05)[p <= 0.05 / (2 * k)].all()
    # 10 configurations: five with a small lead certified (theta > 0 and theta < delta: only "theta >= 0" can
    # still hold there), so at most 5 x 1 + 5 x 2 = 15 hypotheses are true together; a sixth win at
    # p = 0.003 fails the union bound's 0.05 / 20 = 0.0025 but passes the closed test's 0.05 / 16
    p = np.ones((10, 4))
    p[:5, 0] = p[:5, 2] = 1e-6
    p[5, 0] = 0.003
    rejected = closed_test(p, 0.05)
    assert not p[5, 0] <= 0.05 / 20 and rejected[5, 0] and rejected[:5, [0, 2]].all() and rejected.sum() == 11


def crows_problem(shares: dict[str, float], n_items: int = 300, seed: int = 0):
    """CrowS-Pairs' 12 configurations, each item a 0/1 'stereotypical sentence wins' per model."""
    rng = np.random.default_rng(seed)
    configs = tuple(c.config_id for c in RULES.configs("crows_pairs"))
    ids = tuple(f"crows_pairs/{i:04d}" for i in range(n_items))
    scores = {
        (cid, m): dict(zip(ids, (rng.random(n_items) < p).astype(float), strict=True))
        for cid in configs
        for m, p in shares.items()
    }

    def oracle(bench, config_id, model, item_ids):
        return np.array([scores[(config_id, model)][i] for i in item_ids])

    return BenchmarkProblem("crows_pairs", configs, tuple(sorted(shares)), ids, 1), oracle


@pytest.mark.parametrize("target", ["population", "subset"])
def test_crows_pairs_claims_favour_the_model_closer_to_half(target):
    """a's stereotype share 0.50, b's 0.90 on all 12 configurations: b's raw score is higher, but a is the
    unbiased one (theta = |0.9 - 0.5| - |0.5 - 0.5| = 0.4), so every claim is a's and the pair is stable_a."""
    problem, oracle = crows_problem({"a": 0.5, "b": 0.9})
    result = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.05, seed=0, target=target))
    assert {c.claim for c in result.claims} == {"a_better"}
    assert result.pairs[0].verdict == "stable_a"
    for c in result.claims:
        assert c.lower <= 0.4 <= c.upper and abs(c.estimate - 0.4) < 0.15


def test_crows_pairs_reads_distance_not_the_raw_share():
    """a at 0.40, b at 0.95: b's share is higher, but a is nearer 0.5 (0.10 against 0.45): theta = 0.35 > 0.
    No claim may favour b; with 300 items per configuration a's lead is found."""
    problem, oracle = crows_problem({"a": 0.4, "b": 0.95}, seed=1)
    result = certify([problem], oracle, OPTIONS)
    claims = {c.claim for c in result.claims}
    assert "b_better" not in claims and "a_better" in claims


def _null_world(rng, n_configs: int, n_items: int):
    """Identical models on n_configs configurations: per item a chance of a correct answer shared by both."""
    z = rng.normal(0, 1, (n_configs, n_items))
    p = 1 / (1 + np.exp(-(0.4 - 0.8 * z)))
    return (rng.random((2, n_configs, n_items)) < p).astype(float)


def _pick_extremes_and_certify(seed: int, mode: str, n_configs: int = 204, pilot: int = 24, n_items: int = 300):
    rng = np.random.default_rng(seed)
    x = _null_world(rng, n_configs, n_items)
    configs = [f"truthfulqa/c{j:03d}" for j in range(n_configs)]
    ids = [f"truthfulqa/{i:04d}" for i in range(n_items)]
    pilot_diff = (x[0, :, :pilot] - x[1, :, :pilot]).mean(axis=1)
    chosen = [configs[int(np.argmax(pilot_diff))], configs[int(np.argmin(pilot_diff))]]
    scores = {
        (configs[j], m): dict(zip(ids, x[k, j], strict=True)) for j in range(n_configs) for k, m in enumerate("ab")
    }
    excluded = {c: frozenset(ids[:pilot]) for c in chosen} if mode == "records" else {}
    family = tuple(c for c in configs if c not in chosen) if mode == "family" else ()
    problem = BenchmarkProblem("truthfulqa", tuple(chosen), ("a", "b"), tuple(ids), 1, family, excluded)

    def oracle(bench, config_id, model, item_ids):
        return np.array([scores[(config_id, model)][i] for i in item_ids])

    # the pilot's items are the first draws, as a sweep's --limit 24 records are certify's first 24
    result = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.05, order="subset", target="population"))
    return any(c.claim in ("a_better", "b_better") for c in result.claims)


@pytest.mark.slow
def test_configurations_picked_from_a_pilot_are_certified_validly():
    """Issue 39's simulation: null worlds of 204 configurations, the largest and smallest 24-item pilot
    difference certified. Taken as fixed (alpha over 2, the pilot's items used) false claims exceed alpha;
    with the pilot's items left out (`--selection records`) or alpha over all 204 (`--selection family`)
    they stay within it."""
    n = 200
    naive = sum(_pick_extremes_and_certify(s, "none") for s in range(n))
    records = sum(_pick_extremes_and_certify(s, "records") for s in range(n))
    family = sum(_pick_extremes_and_certify(s, "family") for s in range(n))
    assert naive / n > 0.05, f"the naive pick made {naive} of {n} false claims: the simulation lost its point"
    assert upper_share(records, n) <= 0.05, f"{records} of {n}"
    assert upper_share(family, n) <= 0.05, f"{family} of {n}"
