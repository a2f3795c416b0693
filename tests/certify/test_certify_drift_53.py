"""Issue 53: the control variate's partner items come from the back of the draw order, so a cheap twin whose
mean drifts along a fixed item order makes them unlike the front and the control's claims false. certify now
refuses `--control auto` with `--order subset` (test_certify_selection_53.py); here, by simulation, the order it
takes instead keeps the claims true where the drift would have made them false.

The world: one free-form configuration on which the two models are alike item by item (its law difference is
0, so any claim there is false), and its log-probability twin, a copy of the free-form answer 75 % of the time
and otherwise a draw whose chance drifts from 1 to 0 for model a (0 to 1 for b) along the subset's order. The
twin's paired differences correlate with the free-form ones (so the control takes partner steps), and its mean
is about +0.22 over the first quarter of the order and -0.22 over the last. Partners are taken wherever the
correlation asks (FIT_MARGIN 0, as test_certify_control_slow.py: the capacity rule is a choice about cost), so
every grid takes them, on a null configuration too."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from test_control_variate import upper_share

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.sequential import control_variate

FREE, TWIN = "truthfulqa/T1/greedy/0shot/free_form", "truthfulqa/T1/greedy/0shot/logprob"
N_ITEMS = 2000
COPY = 0.75


def draw_order(seed: int, n: int) -> np.ndarray:
    """The positions certify draws the subset's items in with --order seeded (algorithm._setup's permutation)."""
    return np.random.default_rng([seed, zlib.crc32(b"truthfulqa")]).permutation(n)


def drifting_world(rng: np.random.Generator, along: np.ndarray):
    """(problem, oracle) with the twin drifting along `along` (item positions in the order the drift follows)."""
    ids = tuple(f"truthfulqa/{i:04d}" for i in range(N_ITEMS))
    rank = np.empty(N_ITEMS)
    rank[along] = np.arange(N_ITEMS) / (N_ITEMS - 1)  # 0 at the drift's front, 1 at its back
    drift = {"a": 1 - rank, "b": rank}
    scores = {}
    for m in "ab":
        free = (rng.random(N_ITEMS) < 0.5).astype(float)
        copied = rng.random(N_ITEMS) < COPY
        scores[(FREE, m)] = free
        scores[(TWIN, m)] = np.where(copied, free, (rng.random(N_ITEMS) < drift[m]).astype(float))
    index = {i: k for k, i in enumerate(ids)}

    def oracle(bench, config_id, model, item_ids):
        return scores[(config_id, model)][[index[i] for i in item_ids]]

    return BenchmarkProblem("truthfulqa", (FREE, TWIN), ("a", "b"), ids, 1), oracle


def false_claims(grids: int, aligned: bool) -> tuple[int, int]:
    """(grids with a claim on the free-form configuration, grids whose control took partner steps). `aligned`:
    the drift follows certify's own draw order, which is what --order subset gave it (the subset's order is the
    draw order); else it follows the subset's order while certify draws in its seeded random order, as the
    refusal makes it."""
    wrong = partnered = 0
    for g in range(grids):
        options = CertifyOptions(alpha=0.05, delta=0.05, seed=g, control="auto")
        along = draw_order(g, N_ITEMS) if aligned else np.arange(N_ITEMS)
        problem, oracle = drifting_world(np.random.default_rng(900 + g), along)
        result = certify([problem], oracle, options)
        partnered += result.control["truthfulqa"]["partner_steps"] > 0
        wrong += any(c.claim in ("a_better", "b_better") for c in result.claims if c.config_id == FREE)
    return wrong, partnered


def test_the_drift_follows_the_subset_order_and_the_draw_order_breaks_it():
    """Over 10 worlds (one world's halves are noisy: sd 0.022): the twin's paired difference is +0.125 over the
    first half of the subset's order and -0.125 over the second (expected), the free-form one 0 throughout, the
    two correlate at about 0.74; in certify's seeded draw order the halves are alike."""
    front, back, drawn_gap, free, r = [], [], [], [], []
    half = N_ITEMS // 2
    for seed in range(10):
        problem, oracle = drifting_world(np.random.default_rng(seed), np.arange(N_ITEMS))
        ids = list(problem.item_ids)
        c = oracle("truthfulqa", TWIN, "a", ids) - oracle("truthfulqa", TWIN, "b", ids)
        d = oracle("truthfulqa", FREE, "a", ids) - oracle("truthfulqa", FREE, "b", ids)
        drawn = c[draw_order(seed, N_ITEMS)]
        front.append(c[:half].mean())
        back.append(c[half:].mean())
        drawn_gap.append(drawn[:half].mean() - drawn[half:].mean())
        free.append(d.mean())
        r.append(np.corrcoef(c, d)[0, 1])
    assert np.mean(front) == pytest.approx(0.125, abs=0.03) and np.mean(back) == pytest.approx(-0.125, abs=0.03)
    assert abs(np.mean(drawn_gap)) < 0.03 and abs(np.mean(free)) < 0.02
    assert np.mean(r) == pytest.approx(0.74, abs=0.03)


@pytest.mark.slow
def test_a_twin_drifting_along_the_subset_order_makes_no_false_claims_in_the_order_the_refusal_leaves(monkeypatch):
    """With the drift along the draw order (what --order subset allowed) the control's claims on the null
    configuration are false in most grids (40 of 40 measured); in the seeded order the refusal leaves, within
    alpha (0 of 40). The paths may take a third of the subset's back as partners, as certify did before issue 56
    (it takes 50 items now, where the drift barely bites: a pool beyond the subset, drawn apart from it, is where
    many partners come from)."""
    monkeypatch.setattr(control_variate, "FIT_MARGIN", 0.0)
    monkeypatch.setattr(control_variate, "MIN_PARTNER_ITEMS", N_ITEMS // 3)
    monkeypatch.setattr(control_variate, "BACK_SHARE", 1 / 3)
    n = 40
    aligned, partnered = false_claims(n, aligned=True)
    assert partnered == n and aligned >= n // 2, f"{aligned} of {n}: the drift lost its bite"
    wrong, partnered = false_claims(n, aligned=False)
    assert partnered == n
    assert upper_share(wrong, n) <= 0.05 and wrong <= 1, f"{wrong} of {n} grids with a false claim"
