"""The engine's top-p nucleus is transformers' TopPLogitsWarper's, token for token, on both of its
paths: the partial sort over the top candidates and the warper's own full sort (no model weights)."""

from __future__ import annotations

import pytest
import torch
from transformers import TopPLogitsWarper

from safetyrepro.adapters.engine.sampling import NUCLEUS_PROBE, top_p_keep

VOCAB = 49152  # SmolLM2's


def warper_keeps(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    return torch.isfinite(TopPLogitsWarper(top_p)(None, scores[None].clone())[0])


def scores_with(probs_on_top: list[float], vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    """Logits whose first tokens carry `probs_on_top` and the rest share what is left, unevenly."""
    g = torch.Generator().manual_seed(seed)
    tail = torch.rand(vocab - len(probs_on_top), generator=g) + 0.5
    tail = tail / tail.sum() * (1 - sum(probs_on_top))
    return torch.cat([torch.tensor(probs_on_top), tail]).log().float()


class Counted:
    """top_p_keep, counting the calls that fell back to the warper's full sort."""

    def __init__(self):
        self.full_sorts = 0

    def __call__(self, scores, top_p):
        real = torch.sort

        def counting_sort(*a, **k):
            self.full_sorts += 1
            return real(*a, **k)

        torch.sort = counting_sort
        try:
            return top_p_keep(scores, top_p)
        finally:
            torch.sort = real


def test_random_vocabularies_keep_what_the_warper_keeps():
    ours = Counted()
    g = torch.Generator().manual_seed(1)
    for i in range(600):
        temperature, top_p = [(0.3, 0.9), (0.7, 0.9), (1.0, 0.95), (0.7, 0.5)][i % 4]
        scores = torch.randn(VOCAB, generator=g) * (1 + 7 * torch.rand(1, generator=g))
        scores[: 1 + i % 50] += 10 * torch.rand(1, generator=g)  # a head of likely tokens of varying width
        scores = scores / temperature
        assert torch.equal(ours(scores, top_p), warper_keeps(scores, top_p)), i
    assert 0 < ours.full_sorts < 300  # both paths ran, the partial sort most of the time


def test_a_sharp_head_is_decided_without_a_full_sort():
    ours = Counted()
    scores = scores_with([0.6, 0.25, 0.08, 0.04])
    keep = ours(scores, 0.9)
    assert keep[:3].all() and int(keep.sum()) == 3  # 0.6 + 0.25 < 0.9: the third is kept, the fourth not
    assert torch.equal(keep, warper_keeps(scores, 0.9)) and ours.full_sorts == 0


@pytest.mark.parametrize("mass_above", [0.9, 0.9 + 2e-4, 0.9 - 2e-4])
def test_a_boundary_within_rounding_of_top_p_goes_to_the_full_sort(mass_above):
    # the mass above the third token is within rounding of top_p: only the warper's own sums decide it
    ours = Counted()
    scores = scores_with([0.5, mass_above - 0.5, 0.05])
    assert torch.equal(ours(scores, 0.9), warper_keeps(scores, 0.9)) and ours.full_sorts == 1


def test_a_nucleus_wider_than_the_probe_and_a_straddling_tie_go_to_the_full_sort():
    ours = Counted()
    flat = scores_with([], vocab=4 * NUCLEUS_PROBE)
    keep = ours(flat, 0.9)
    assert torch.equal(keep, warper_keeps(flat, 0.9))
    assert int(keep.sum()) > NUCLEUS_PROBE and ours.full_sorts == 1
    # 0.85 above the third token, 0.91 above the fourth, and the two tie: which one stays is the sort's call
    tie = scores_with([0.55, 0.3, 0.06, 0.06])
    keep = ours(tie, 0.9)
    assert torch.equal(keep, warper_keeps(tie, 0.9)) and ours.full_sorts == 2
    assert int(keep[:4].sum()) == 3


def test_top_p_one_and_a_lone_token():
    scores = scores_with([0.999999])
    assert int(top_p_keep(scores, 0.5).sum()) == 1
    one = torch.tensor([3.0])
    assert top_p_keep(one, 0.9).tolist() == [True]


def test_a_batch_of_rows_keeps_what_each_row_keeps_alone():
    from safetyrepro.adapters.engine.sampling import nucleus

    g = torch.Generator().manual_seed(5)
    scores = torch.randn(12, VOCAB, generator=g) * 3
    scores[:, :8] += torch.rand(12, 1, generator=g) * 12
    scores[3] = scores_with([0.5, 0.4 - 1e-4, 0.05])  # a boundary within rounding: the full sort
    together = nucleus(scores, 0.9)
    for r in range(12):
        alone = nucleus(scores[r : r + 1].clone(), 0.9)[0]
        assert torch.equal(together[r], alone) and bool((alone[1:] > alone[:-1]).all())  # ascending
        assert torch.equal(top_p_keep(scores, 0.9)[r], warper_keeps(scores[r], 0.9))


def test_the_draw_is_the_inverse_cdf_of_one_uniform():
    """Token ids 2 and 5 with probabilities 1/4 and 3/4: the draw is id 2 exactly when the request's
    generator gives u < 1/4, and over many seeds the frequencies are the probabilities."""
    from safetyrepro.adapters.engine.sampling import draw

    scores = torch.full((8,), -5.0)
    scores[2], scores[5] = 0.0, float(torch.log(torch.tensor(3.0)))
    ids = torch.tensor([2, 5])
    picks = []
    for seed in range(4000):
        u = float(torch.rand((), dtype=torch.float64, generator=torch.Generator().manual_seed(seed)))
        tok = draw(scores, ids, torch.Generator().manual_seed(seed))
        assert tok == (2 if u < 0.25 else 5)
        picks.append(tok)
    assert abs(picks.count(2) / len(picks) - 0.25) < 0.03
    assert draw(scores, torch.tensor([5]), torch.Generator().manual_seed(0)) == 5


def test_next_tokens_of_a_row_do_not_depend_on_the_rows_beside_it():
    from safetyrepro.adapters.backends.backend import GenRequest
    from safetyrepro.adapters.engine.sampling import next_tokens

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(9, 4096, generator=g) * 3
    logits[:, :5] += 6
    settings = [
        (0.0, 1.0),
        (0.3, 0.9),
        (0.7, 0.95),
        (0.3, 0.9),
        (1.0, 1.0),
        (0.3, 0.9),
        (0.0, 1.0),
        (0.7, 0.5),
        (0.7, 0.95),
    ]
    reqs = [GenRequest("p", 4, temperature=t, top_p=p, seed=i) for i, (t, p) in enumerate(settings)]

    def gens(rows):
        return [torch.Generator().manual_seed(100 + i) for i in rows]

    every = list(range(9))
    got = next_tokens(logits, reqs, gens(every))
    assert got[0] == int(logits[0].argmax()) and got[6] == int(logits[6].argmax())
    for rows in ([1], [4, 2], [8, 7, 5, 3]):
        assert next_tokens(logits[rows], [reqs[i] for i in rows], gens(rows)) == [got[i] for i in rows]
    # each sampled token lies in its row's nucleus, and sampling is not argmax
    for b, (t, p) in enumerate(settings):
        if t > 0:
            assert bool(top_p_keep(logits[b] / t, p)[got[b]])
    draws = [next_tokens(logits[1:2], reqs[1:2], [torch.Generator().manual_seed(s)])[0] for s in range(40)]
    assert len(set(draws)) > 1
