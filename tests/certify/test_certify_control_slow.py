"""certify --control auto keeps issue 39's calibration (issue 45's acceptance): over 200 synthetic 300-item grids
whose free-form and log-probability differences correlate at r = 0.8 (so the control takes partner steps),
identical models or identical on part of the envelope and one-sided elsewhere, the share of grids with any
claim the law contradicts, and of no-flip grids that end flip, is within alpha by the binomial interval."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from certify_grids import correlated_problem, greedy_short, short
from test_certify_population import RULES, contradicted, half_null, identical, law_mean, upper_share

from safetyrepro.certify.algorithm import CertifyOptions, certify
from safetyrepro.sequential import control_variate

OPTIONS = CertifyOptions(alpha=0.05, delta=0.05, seed=0, target="population", control="auto")


def tied(cfg) -> float:
    return 0.8 if cfg.decoding == "greedy" else 0.51  # twin correlation about 0.8 (test_certify_control.py)


@pytest.mark.slow
@pytest.mark.parametrize("control", ["auto", "time"])
def test_claims_against_the_law_with_the_control_are_at_most_alpha_of_200_null_and_half_null_grids(
    monkeypatch, control
):
    """Templates T1 and T3 at 0 and 5 shots (12 free-form configurations helped by 4 twins) keep it short; the
    guarantee does not depend on the family's size. Partners are taken wherever the correlation asks, whether
    or not the items are expected to last (FIT_MARGIN 0: the capacity rule is a choice about cost, and any
    choice fixed by the path's past is valid), so the null configurations take them too: every grid does. Half
    the grids' subsets come with a pool beyond them (600 items), whose partners are taken up to 16 a step, or
    (`--control time`, the items' costs known as a live run knows them) as many as pay for their model time."""
    from certify_grids import CostedOracle

    monkeypatch.setattr(control_variate, "FIT_MARGIN", 0.0)
    wrong = flips = 0
    n = 200
    for seed in range(n):
        accuracy = identical if seed % 2 == 0 else half_null
        pool = {"n_items": 900, "subset": 300} if seed % 4 >= 2 else {}
        problem, oracle, _ = correlated_problem(np.random.default_rng(3000 + seed), accuracy, tied, **pool)
        law = {
            c.config_id: law_mean(accuracy(c, "a")) - law_mean(accuracy(c, "b")) for c in RULES.configs("truthfulqa")
        }
        options = dataclasses.replace(OPTIONS, control=control)
        result = certify([short(problem)], CostedOracle(oracle, known=True), options)
        assert result.control["truthfulqa"]["partner_steps"] > 0
        wrong += any(contradicted(c.claim, law[c.config_id], OPTIONS.delta) for c in result.claims)
        flips += result.pairs[0].verdict == "flip"
    assert upper_share(wrong, n) <= OPTIONS.alpha, f"{wrong} of {n} grids with a false claim"
    assert upper_share(flips, n) <= OPTIONS.alpha, f"{flips} of {n} no-flip grids ended flip"


SUBSET = CertifyOptions(alpha=0.05, delta=0.05, seed=0, target="subset", control="auto")


@pytest.mark.slow
def test_subset_claims_with_the_control_are_at_most_alpha_of_200_null_and_half_null_grids():
    """The subset target's control (the twin's whole subset, no partners): 200 grids as above, a claim checked
    against the subset's own realised difference, which is what it is about. Identical models' subsets differ by
    chance, so many grids end in a flip of the realised numbers within a few rounds; 81 took controlled steps."""
    wrong = controlled = 0
    n = 200
    for seed in range(n):
        accuracy = identical if seed % 2 == 0 else half_null
        problem, oracle, full = correlated_problem(np.random.default_rng(5000 + seed), accuracy, tied)
        result = certify([short(problem)], oracle, SUBSET)
        controlled += result.control["truthfulqa"]["controlled_steps"] > 0
        wrong += any(contradicted(c.claim, full[c.config_id], SUBSET.delta) for c in result.claims)
    assert controlled >= 60, controlled
    assert upper_share(wrong, n) <= SUBSET.alpha, f"{wrong} of {n} grids with a false claim"


def lead_010(cfg, model):
    return 0.60 if model == "a" else 0.50


def free_form_both_ways(
    options: CertifyOptions, n_items: int, grids: int, tie, subset: int | None = None, lead=lead_010, keep=None
) -> dict[str, int]:
    """The free-form evaluations, with the control and without, over `grids` grids with a lead everywhere (0.10
    unless `lead` says; T1 and T3 at 0 and 5 shots, `keep` picks among them; cost-aware rounds as a live run makes
    them); every grid ends stable_a both ways."""
    from certify_grids import CostedOracle

    keep = keep or short
    worlds = [
        correlated_problem(np.random.default_rng(400 + g), lead, tie, n_items=n_items, subset=subset)
        for g in range(grids)
    ]
    costly = {}
    for control in ("none", "auto"):
        runs = [
            certify(
                [keep(p)],
                CostedOracle(o, known=True),
                dataclasses.replace(options, seed=g, control=control, round_seconds=60.0),
            )
            for g, (p, o, _) in enumerate(worlds)
        ]
        assert [x.pairs[0].verdict for x in runs] == ["stable_a"] * grids
        costly[control] = sum(
            len(v) for x in runs for (_, cid, _), v in x.evaluated.items() if cid.endswith("/free_form")
        )
    return costly


@pytest.mark.slow
def test_subset_control_cuts_the_costly_items_where_claims_need_many():
    """1,000-item grids, a 0.10 lead everywhere (claims need hundreds of items), r = 0.8 (perf/certify_control.py
    tabulates more): the same verdicts for at most 0.62 of the free-form evaluations (0.587 measured on these four
    grids; 0.489 before issue 56, when the plain steps it is measured against bet the width-tuned stake); r = 0:
    at most 5 % more (1.011; issue 56 allows 10 %)."""
    for tie, most in ((tied, 0.62), (lambda cfg: 0.0, 1.05)):
        costly = free_form_both_ways(SUBSET, 1000, 4, tie)
        assert costly["auto"] <= most * costly["none"], costly


@pytest.mark.slow
def test_population_control_halves_the_costly_items_of_2000_item_subsets_of_a_larger_pool():
    """Issue 56: 2,000-item subsets whose twins score the benchmark's pool beyond them (18,000 more items, the
    partners, up to 16 a step), a 0.10 lead, r = 0.8: the same verdicts for at most half the free-form evaluations
    (0.485 measured on these two grids); r = 0: at most 10 % more (1.007)."""
    for tie, most in ((tied, 0.5), (lambda cfg: 0.0, 1.1)):
        costly = free_form_both_ways(OPTIONS, 20_000, 2, tie, subset=2000)
        assert costly["auto"] <= most * costly["none"], costly


def lead_015(cfg, model):
    return 0.65 if model == "a" else 0.50


@pytest.mark.slow
def test_population_control_halves_the_costly_items_of_greedy_configurations_at_a_015_lead():
    """Issue 56 at the 0.15 lead: where the configurations answer 0/1 (greedy decoding; a sampled one's five-seed
    means leave a twin too little to halve, its ceiling is 0.60), 2,000-item subsets of 20,000, r = 0.8: the same
    verdicts for at most half the free-form evaluations (0.473 on these four grids, 0.482 on perf's 16, whose
    ceiling is 0.433); r = 0: at most 10 % more (1.000)."""
    for tie, most in ((tied, 0.5), (lambda cfg: 0.0, 1.1)):
        costly = free_form_both_ways(OPTIONS, 20_000, 4, tie, subset=2000, lead=lead_015, keep=greedy_short)
        assert costly["auto"] <= most * costly["none"], costly


@pytest.mark.slow
def test_control_time_spends_less_model_time_than_none_where_auto_spends_more():
    """`--control time` on the grids above (greedy, 0.15 lead, r = 0.8; a twin item a tenth of a free-form one):
    the same verdicts for less model time than without the control (0.806 measured on these four grids, 0.811 on
    perf's 16) where `--control auto` spends more (1.103), at more free-form evaluations than auto's (0.554
    against 0.473)."""
    from certify_grids import CostedOracle

    worlds = [
        correlated_problem(np.random.default_rng(400 + g), lead_015, tied, n_items=20_000, subset=2000)
        for g in range(4)
    ]
    spent, costly = {}, {}
    for control in ("none", "auto", "time"):
        oracles = [CostedOracle(o, known=True) for _, o, _ in worlds]
        runs = [
            certify(
                [greedy_short(p)], oracle, dataclasses.replace(OPTIONS, seed=g, control=control, round_seconds=60.0)
            )
            for g, ((p, _, _), oracle) in enumerate(zip(worlds, oracles, strict=True))
        ]
        assert [x.pairs[0].verdict for x in runs] == ["stable_a"] * 4
        spent[control] = sum(o.spent() for o in oracles)
        costly[control] = sum(
            len(v) for x in runs for (_, cid, _), v in x.evaluated.items() if cid.endswith("/free_form")
        )
    assert spent["time"] <= 0.9 * spent["none"] and spent["auto"] >= spent["none"], spent
    assert costly["auto"] < costly["time"] <= 0.6 * costly["none"], costly
