"""CrowS-Pairs' sign claims from the paired sign test (issue 56): both models answer the same items, so "a is not
closer to 0.5" is tested on the paired (x_a - x_b, x_a + x_b - 1); wrong claims on null streams stay within alpha,
and it decides where the two shares' sequences alone did not."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from scipy.stats import binomtest

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.sequential.closed_testing import closed_test_each
from safetyrepro.sequential.evidence import PairedEvidence, claims_from_rejections
from safetyrepro.tasks.envelope import default_rules


def paired_answers(rng, streams: int, items: int, pa: float, pb: float, agree: float | None):
    """0/1 answers of two models with shares pa, pb that agree on a share `agree` of items (None: independent)."""
    both = pa * pb if agree is None else (agree - 1 + pa + pb) / 2
    cells = np.array([both, pa - both, pb - both, 1 - pa - pb + both])  # (1, 1), (1, 0), (0, 1), (0, 0)
    k = rng.choice(4, size=(streams, items), p=cells)
    return (k <= 1).astype(float), ((k == 0) | (k == 2)).astype(float)


def end_p_values(a, b, alpha_side: float, chunk: int = 200) -> np.ndarray:
    """(streams, 4) p-values after every item, `chunk` streams to a PairedEvidence (the shares' cell boxes take
    streams x cells^2 floats)."""
    out = []
    for at in range(0, len(a), chunk):
        ev = PairedEvidence(0.5, len(a[at : at + chunk]), a.shape[1], "population", alpha_side, 0.05, None)
        for t in range(a.shape[1]):
            ev.update(np.arange(len(a[at : at + chunk])), a[at : at + chunk, t], b[at : at + chunk, t])
        out.append(ev.p_values())
    return np.concatenate(out)


@pytest.mark.parametrize(
    ("pa", "pb", "agree", "wrong", "measured"),
    [
        (0.6, 0.4, None, {"a_better", "b_better"}, (31, 38)),  # theta = 0: d = 0.2, s = 0
        (0.65, 0.65, 0.8, {"a_better", "b_better"}, (24, 23)),  # theta = 0: d = 0, s = 0.3, correlated
        (0.5, 0.5, 0.8, {"a_better", "b_better"}, (2, 1)),  # the corner d = s = 0
        (0.6, 0.42, 0.7, {"a_better"}, (14, 18)),  # half-null: a further from 0.5 by 0.02, only "a is not closer" holds
    ],
)
def test_wrong_sign_claims_on_null_streams_stay_within_alpha(pa, pb, agree, wrong, measured):
    """600 streams of 300 items, each its own family at alpha 0.2 (large, so a miscalibration would show): the
    share of streams with a wrong claim, read at the end (the p-values only fall), is at most alpha by
    Clopper-Pearson. `measured`: the wrong claims counted 2026-12-07 with IidBettingCS's growth-rate and its
    width-tuned stakes (the default moved from the second to the first, issue 56); neither is exceeded."""
    alpha, streams = 0.2, 600
    a, b = paired_answers(np.random.default_rng(7), streams, 300, pa, pb, agree)
    claims = claims_from_rejections(closed_test_each(end_p_values(a, b, alpha / 2), alpha))
    k = sum(c in wrong for c in claims)
    assert binomtest(k, streams).proportion_ci(0.95).low <= alpha
    assert k <= max(measured)


def test_the_paired_test_decides_in_far_fewer_items_than_the_shares():
    """a at 0.55, b at 0.68 (theta = 0.13), agreeing on 80 % of items, at the level of a 120-claim family: the paired
    sign test claims a's lead in a median 336 items (90 % by 541; with width-tuned stakes 411 and 732, 98 % within
    1,000; measured 2026-12-07); the shares' sequences alone claim it on none of the 100 streams within 1,000 items
    (their median is about 2,400, perf/certify_crows_paired.md)."""
    K, alpha, items, streams = 120, 0.05, 1000, 100
    a, b = paired_answers(np.random.default_rng(0), streams, items, 0.55, 0.68, 0.8)
    ev = PairedEvidence(0.5, streams, items, "population", alpha / K / 2, 0.05, None)
    threshold = np.log(2 * K / alpha)  # the closed test's first step, alpha / (2 K)
    first = np.full(streams, np.inf)
    for t in range(items):
        ev.update(np.arange(streams), a[:, t], b[:, t])
        first = np.where(np.isinf(first) & (ev._sign_log_e()[:, 0] >= threshold), t + 1, first)
    assert np.isfinite(first).mean() >= 0.98 and np.median(first) <= 420
    assert not (ev._share_log_e()[:, 0] >= threshold).any()
    assert np.mean(ev.p_values()[:, 0] <= alpha / (2 * K)) >= 0.98  # what certify reads


def crows_grid(shares, rho: float, n_items: int, seed: int = 0):
    """CrowS-Pairs' 12 configurations, models with the given shares (each configuration shifts them by one draw
    of +-0.03); on a share rho of items every model reads one common draw, elsewhere its own."""
    rng = np.random.default_rng(seed)
    configs = tuple(c.config_id for c in default_rules().configs("crows_pairs"))
    models = tuple(f"m{k}" for k in range(len(shares)))
    ids = tuple(f"crows_pairs/{i:04d}" for i in range(n_items))
    scores = {}
    for cid in configs:
        p = np.array(shares) + rng.uniform(-0.03, 0.03)
        common = rng.random(n_items) < rho
        u = rng.random(n_items)
        for m, pm in zip(models, p, strict=True):
            answers = np.where(common, u, rng.random(n_items)) < pm
            scores[(cid, m)] = dict(zip(ids, answers.astype(float), strict=True))

    def oracle(bench, config_id, model, item_ids):
        return np.array([scores[(config_id, model)][i] for i in item_ids])

    return BenchmarkProblem("crows_pairs", configs, models, ids, 1), oracle, scores


def test_certify_decides_more_crows_pairs_configurations_at_a_fixed_budget():
    """Three models at 0.55, 0.63 and 0.72 on 12 configurations (36 claims), 600 items, rho 0.7: certify makes 27
    claims (23 with width-tuned stakes), every one right; with the shares' boxes for the sign nulls too (the code
    before) it made 1 (measured 2026-12-07)."""
    problem, oracle, _ = crows_grid((0.55, 0.63, 0.72), 0.7, 600)
    options = CertifyOptions(alpha=0.05, delta=0.05, allocation="uniform", seed=0)
    after = certify([problem], oracle, options)
    with mock.patch.object(PairedEvidence, "_sign_log_e", lambda self: self._share_log_e()[:, :2]):
        before = certify([problem], oracle, options)
    made = [sum(c.claim != "undecided" for c in r.claims) for r in (before, after)]
    assert made[0] == 1 and made[1] >= 23
    # the closer model (lower share, all above 0.5) is the better one: no claim favours the farther
    assert {c.claim for c in after.claims} <= {"a_better", "undecided"}
