"""The engine's next-token choice: greedy argmax, or a seeded draw from the top-p nucleus.

- temperature == 0: argmax of the model's logits (first index on ties), as transformers' greedy search.
- temperature > 0: the logits divided by the temperature; the nucleus is the set of tokens
  transformers' TopPLogitsWarper keeps, token for token (`nucleus`, `top_p_keep`); one token is
  drawn from softmax over the nucleus by inverse CDF: the nucleus in vocabulary order, float64
  cumulative weights exp(score - max), one float64 uniform u from the request's own generator, the
  first token whose cumulative weight exceeds u x the total. A request's text thus depends only on
  its prompt, seed, temperature, top_p and max_new_tokens, never on the rows decoded beside it.

Why not `torch.multinomial`: with one sample it draws one exponential variate per vocabulary entry
(the exponential-race trick), 49k-262k draws per token, 0.7 ms a row on this CPU: at 120 rows it
was 100 ms of a 200 ms decode step. The inverse CDF needs one uniform and the nucleus (usually
tens of tokens). Both are exact draws from the same distribution; the texts differ from the
multinomial sampler's (the engine's decode version says which one made a cached output).
"""

from __future__ import annotations

from collections.abc import Sequence

# rows scaled and searched together: their [rows, vocab] temporaries stay small enough (1.5 MB for
# 49k tokens) to be reused from the heap; 120 rows at once made 23 MB ones that page-fault anew each step
SAMPLE_BLOCK = 8
NUCLEUS_PROBE = 64  # top-p: candidates looked at (a partial sort) before the warper's full sort
# Float32 rounding of the warper's cumulative sum over a whole vocabulary stays below 6e-4 (at most
# vocab x 2^-24 x 0.1 for the sum, as much again for the softmax's normaliser), and ours (float32
# exponentials summed in float64) below 1e-5; a boundary this far from top_p is decided the same way
# by the warper and by any exact computation.
NUCLEUS_MARGIN = 1e-3


def nucleus(scores, top_p: float) -> list:
    """Per row of `scores` ([R, V] float32 logits already divided by the temperature), the token ids
    TopPLogitsWarper keeps, ascending. The warper sorts the whole vocabulary ascending and drops
    every token whose cumulative probability from the bottom is <= 1 - top_p, the most likely one
    never; put the other way round, a token is kept while the probability above it is < top_p.
    That is decided from the top NUCLEUS_PROBE candidates (a partial sort) in float64, against a
    normaliser of float32 exponentials summed in float64, whenever the nucleus lies among them, no
    candidate's mass above it is within NUCLEUS_MARGIN of top_p, and no tie straddles the boundary;
    the other rows run the warper's own steps (a full sort, 0.4 % of sampled tokens in a T4 cell).
    Rows are independent: a batch gives each row what it gets alone."""
    import torch

    if top_p >= 1.0:
        ids = torch.arange(scores.shape[-1], device=scores.device)
        return [ids for _ in range(scores.shape[0])]
    k = min(NUCLEUS_PROBE, scores.shape[-1])
    top, idx = scores.topk(k, dim=-1)
    m = top[:, :1]
    total = torch.exp(scores - m).sum(dim=-1, keepdim=True, dtype=torch.float64)
    probs = torch.exp(top.double() - m.double()) / total
    above = probs.cumsum(dim=-1) - probs  # the probability of the candidates above each one
    n_keep = (above < top_p).sum(dim=-1)  # >= 1: nothing is above the first
    last = idx.gather(1, (n_keep - 1)[:, None])
    nxt = idx.gather(1, n_keep.clamp(max=k - 1)[:, None])
    fast = (
        (n_keep < k)
        & ((above - top_p).abs().amin(dim=-1) > NUCLEUS_MARGIN)
        & (scores.gather(1, last) != scores.gather(1, nxt))[:, 0]
    )
    out = []
    for r, (ok, n) in enumerate(zip(fast.tolist(), n_keep.tolist(), strict=True)):
        if ok:
            out.append(idx[r, :n].sort().values)
            continue
        sorted_scores, sorted_idx = torch.sort(scores[r], descending=False)
        cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[-1] = False  # keep at least the most likely token
        out.append(sorted_idx[~remove].sort().values)
    return out


def top_p_keep(scores, top_p: float):
    """The warper's kept set as a bool mask over `scores` ([V] or [R, V]); see `nucleus`."""
    import torch

    if scores.dim() == 1:
        return top_p_keep(scores[None], top_p)[0]
    keep = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    for r, ids in enumerate(nucleus(scores, top_p)):
        keep[r, ids] = True
    return keep


def draw(scores, ids, generator) -> int:
    """One token from softmax(scores) restricted to `ids` (ascending), by inverse CDF with one float64
    uniform from `generator`."""
    import torch

    s = scores[ids].double()
    cum = torch.exp(s - s.max()).cumsum(dim=0)
    u = torch.rand((), dtype=torch.float64, generator=generator)
    j = int(torch.searchsorted(cum, u * cum[-1], right=True))
    return int(ids[min(j, len(ids) - 1)])


def next_tokens(logits, reqs: Sequence, gens: Sequence) -> list[int]:
    """Each row's next token (`logits` [R, V], one request and one generator per row): argmax for
    temperature 0, else a seeded draw from the nucleus. Rows with the same temperature and top_p
    are scaled and their nuclei found together, SAMPLE_BLOCK rows at a time (row-wise operations: the
    bits of one row alone)."""
    out = [0] * len(reqs)
    greedy = [b for b, r in enumerate(reqs) if r.temperature == 0]
    if greedy:
        picked = (logits if len(greedy) == len(reqs) else logits[greedy]).argmax(dim=-1).tolist()
        for b, t in zip(greedy, picked, strict=True):
            out[b] = int(t)
    by_setting: dict[tuple[float, float], list[int]] = {}
    for b, r in enumerate(reqs):
        if r.temperature > 0:
            by_setting.setdefault((r.temperature, r.top_p), []).append(b)
    for (temperature, top_p), rows in by_setting.items():
        for i in range(0, len(rows), SAMPLE_BLOCK):
            block = rows[i : i + SAMPLE_BLOCK]
            scores = logits[block].float().cpu() / temperature
            for k, (b, ids) in enumerate(zip(block, nucleus(scores, top_p), strict=True)):
                out[b] = draw(scores[k], ids, gens[b])
    return out
