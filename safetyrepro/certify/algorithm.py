"""Certified pairwise verdicts on a budget: evaluate items in rounds only where a verdict is still open.

What is certified, per benchmark, model pair (model_a < model_b alphabetically) and configuration c, is
theta_c, positive when model_a is better in the benchmark's declared direction (the paired difference of
scores; for CrowS-Pairs the difference in closeness to 0.5), for one of two targets (evidence.py):
`population` (the default: the models on the benchmark's items as draws from the benchmark, the seeds,
the one draw of few-shot examples and the templates held fixed; what another draw of items would confirm)
or `subset` (the fixed subset's realised difference, the number the full grid and the paper's rho_flip
report). Items are drawn in one seeded
random order per benchmark (a configuration chosen by looking at earlier records may exclude them:
`BenchmarkProblem.excluded`), and every pair x configuration keeps an anytime-valid sequence.

Familywise error. `subset`: each two-sided sequence at alpha / (the number of pair x configuration
claims of the family), the union bound. `population`: four one-sided anytime p-values per claim (theta <= 0,
theta >= 0, theta >= delta, theta <= -delta) and a closed test over the whole family
(sequential/closed_testing.py): never less powerful than the union bound, and valid at every stopping time.
The family is every configuration of the problem plus `family_configs`, configurations a selection looked
at but this run does not evaluate (their p-values stay 1). All claims of a run hold together with
probability at least 1 - alpha, whatever the order of evaluation, the allocation, and wherever it stopped.

Per configuration the claim is `a_better`, `b_better`, `within_delta` (|theta| < delta) or `undecided`;
under `subset`, once all N items are drawn theta is known and the claim is read off it. Per pair the
verdict is `flip` (an `a_better` and a `b_better` configuration), `stable_a` / `stable_b` (every
configuration decided, the model wins at least one, the other none: nowhere is the other ahead by delta or
more), `equivalent` (every configuration within delta) or `undecided`.

Allocation (why it spends where it does). A configuration stops as soon as its claim is made, and a pair
as soon as its verdict is known, so work goes only where an answer is still open. Items that cost nothing
(held by the oracle from earlier records, a pilot's, or drawn already for another pair of the same
models) are taken whole, before anything is paid for. What an item costs is the oracle's seconds per item
of each model, when it knows them (a log-probability configuration costs a tenth of a sampled free-form
one; items the oracle already holds cost nothing), else 1.

`flip_hunt` (the default). A flip needs one certified win each way; stable needs every configuration
decided. Free items come in a round of their own, so the plan reads them (a pilot's 24 items per
configuration) before it pays. Then, per open pair, each open configuration gets a chance of ending in a
win in each direction the pair still lacks and the items that win needs (`win_odds`: its running
difference shrunk towards 0 while few items are in, against the smallest difference its items can
certify), so the expected cost of a win there is (cost per item x items still needed) / chance. The
pair's expected cost to a verdict is the cheaper of two routes: a flip (the best such cost for each
missing win) or every open configuration decided (`items_to_decide`). On the flip route the round feeds
only the configuration with the best expected cost for the minority's win (the dearer of the two: without
it the other buys no flip), until it is won, then the other's; on the other route every open
configuration, cheapest answer first. A configuration's first look while hunting is half a batch. Pairs
are served in order of their expected cost to a verdict, and only those within PAIR_RANGE of the
cheapest open pair's: so a small budget decides the cheap flips of every pair before any pair's dear
configurations, and the order is re-planned after each round from what was learnt. The planning numbers
are heuristics; the records they read (a pilot's included) choose where to spend, never what the family
is: every configuration of the run stays in the family alpha covers (and `family_configs`), and each
sequence is valid on its whole fixed draw order, so a configuration chosen by looking at records is
certified with alpha over the whole family it was chosen from (issue 39).

`reversal_first` (kept for comparison: perf/certify_allocation.py). Within an open pair, each round gives
every open configuration `batch` more items, and twice that to the configurations that could reverse the
pair's standing (while the pair has wins on one side only, those whose running difference points the
other way). The open configurations are taken cheapest answer first: each one's expected cost to decide
is the items it still needs (from its running difference and spread, optimistic while it has few items: a
difference d with variance v decides after about 2 v log(1/alpha) / d^2 + log(1/alpha) / |d| items, a
difference inside delta needs the same with delta - |d|, and every item settles it) times what one more
paired item costs, halved for a configuration that could reverse the pair; free items are taken whole,
first. `uniform`: every open configuration the same batch, in plain order.

With `round_seconds` a round takes its draws in that order until its estimated cost is spent, so a budget
that ends early has bought the cheapest answers; without it, a round takes every draw planned (the order
only matters when an evaluation budget cuts the round).

Cheap twins (`control="auto"`; control.py): a free-form configuration's claims come from a control-variate
sequence that its log-probability twin's scores help, on the same items and, for the population target, on
partner items: first from the benchmark's pool beyond the subset (`BenchmarkProblem.pool`, items only the twin
scores), then sparingly from the back of the order (the subset target's: on the twin's whole subset, whose mean
is then known); its next item is priced after the control, with the twin's items it needs, and those are asked
for in the same round, first. `control="time"` is the same with a step's partners capped where their model time
would exceed what they save (the oracle's costs; control.py `Control._cost_ratio`).

Draw order: `seeded` permutes the problem's items with --seed; `subset` keeps the problem's own order,
which for a live run is the fixed subset's seeded order (tasks/subsets.py): a sweep with --limit N
scored exactly the first N draws, so its records serve as certify's first rounds. The control's partner
items need the random order (`seeded`): from the back of a fixed order along which a twin drifts they are
unlike the front, so `control="auto"` (or "time") with `order="subset"` is refused (issue 53).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from safetyrepro.grid.direction import declared_direction
from safetyrepro.grid.grid_io import model_pairs
from safetyrepro.grid.twins import pairings
from safetyrepro.sequential.closed_testing import closed_test
from safetyrepro.sequential.confidence_sequence import IidBettingCS
from safetyrepro.sequential.evidence import (
    READINGS,
    TARGETS,
    PairedEvidence,
    both_read,
    claims_from_rejections,
    population_candidates,
)

from .control import CONTROLS, Control, SubsetControl, uses_twins
from .oracle import Oracle, Scores, as_oracle

CLAIMS = ("a_better", "b_better", "within_delta", "undecided")
VERDICTS = ("flip", "stable_a", "stable_b", "equivalent", "undecided")
ALLOCATIONS = ("flip_hunt", "reversal_first", "uniform")
ORDERS = ("seeded", "subset")
REVERSAL_BOOST = 2
# flip hunting's planning numbers (heuristics: they change what a run costs, never what it claims)
PLAN_PRIOR_SD = 0.3  # a configuration's difference before its items are in (two small models: 0.1-0.3)
PAIR_RANGE = 4.0  # a round serves the pairs whose expected cost to a verdict is within this factor of the least
CLOSENESS_VARIANCE = 1.0  # CrowS-Pairs: the sign on x_a - x_b and x_a + x_b - 1 (each up to 1), bounds on two shares
PLAN_VARIANCE = 0.3  # an item difference's variance before two items are in (0/1 answers, half discordant)


def closeness(benchmark: str) -> float | None:
    """The score a better model sits closer to (CrowS-Pairs: 0.5), None where higher is better, as the
    benchmark's definition declares it."""
    d = declared_direction(benchmark)
    if d.target is None and d.sign < 0:
        raise ValueError(f"{benchmark}: lower-is-better scores are not supported by certify")
    return d.target


@dataclass(frozen=True)
class BenchmarkProblem:
    """One benchmark's part of a run: its configurations, models and the fixed subset's item ids."""

    benchmark: str
    config_ids: tuple[str, ...]
    models: tuple[str, ...]
    item_ids: tuple[str, ...]  # the fixed subset: N items, every configuration scores all of them
    lattice: int | None = None  # item scores are multiples of 1/lattice (5 for 5-seed means of 0/1 scores)
    # configurations of the family a selection looked at that this run does not evaluate (alpha covers them)
    family_configs: tuple[str, ...] = ()
    # per configuration, items a selection looked at: never used as its evidence (its sequence skips them)
    excluded: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # the score a better model sits closer to (CrowS-Pairs: 0.5), None where higher is better; left out, the
    # benchmark's definition says (a name the registry does not know is refused, never read as higher is better)
    ideal: float | None | Literal["declared"] = "declared"
    # items of the benchmark beyond the subset that the cheap twins may score (`control="auto"`, population target):
    # the control's partner items come from them first, so a costly stream keeps its whole subset (issue 56)
    pool: tuple[str, ...] = ()

    def __post_init__(self):
        if self.ideal == "declared":
            object.__setattr__(self, "ideal", closeness(self.benchmark))
        if self.pool and not set(self.pool).isdisjoint(self.item_ids):
            raise ValueError(f"{self.benchmark}: the pool beyond the subset holds items of the subset")

    @property
    def closer_to(self) -> float | None:
        """`ideal`, resolved: the sequences' direction."""
        assert self.ideal != "declared"
        return self.ideal


@dataclass(frozen=True)
class CertifyOptions:
    alpha: float = 0.05
    delta: float = 0.05
    seed: int = 0
    batch: int = 0  # items per configuration per round (0: about N / 30, from 4 to 50)
    budget_evaluations: int | None = None  # paired evaluations (pair x configuration x item)
    budget_seconds: float | None = None  # the oracle's model work (CPU seconds, if it keeps them), else wall time
    allocation: str = "flip_hunt"
    order: str = "seeded"  # "subset": the problem's own item order (a live run's fixed subset order)
    round_seconds: float | None = None  # a round's estimated cost in the oracle's seconds (None: every open stream)
    target: str = "population"  # "population" (the models) or "subset" (the fixed subset's realised numbers)
    held_only: bool = False  # read only what costs nothing (earlier records): re-read a run, evaluate nothing
    familywise: str = "closed"  # population: "closed" (the closed test) or "bonferroni" (for comparison)
    control: str = "none"  # "auto" (cheap twins help costly configurations: control.py), "time" (so, for the least
    # model time rather than the fewest costly evaluations) or "none"
    reading: str = "strict"  # "strict" (an unread reply counts as wrong) or "content" (evidence.READINGS)
    fewshot_draw: str = "fixed"  # how the records' demonstrations were drawn (subsets.FewshotDraw): words only


@dataclass
class _Stream:
    benchmark: str
    pair: tuple[str, str]
    config_id: str
    index: int  # in its benchmark's streams
    slot: int  # its pair's position in the configuration's evidence
    claim: str = "undecided"


@dataclass
class _Bench:
    problem: BenchmarkProblem
    orders: dict[str, np.ndarray]  # per configuration, the item ids it may use, in draw order
    evidence: dict[str, PairedEvidence]  # per configuration, its pairs' sequences
    streams: list[_Stream]
    pairs: list[tuple[str, str]]
    verdict: dict[tuple[str, str], str] = field(default_factory=dict)
    drawn: dict[tuple[str, str], int] = field(default_factory=dict)  # (model, config) -> items evaluated
    control: Control | SubsetControl | None = None  # --control auto: the costly configurations' control-variate paths
    content: bool = False  # --reading content: an item either model's reply was unread on counts 0 (evidence.py)

    def t(self, st: _Stream) -> int:
        return int(self.evidence[st.config_id].t[st.slot])

    def n(self, st: _Stream) -> int:
        if self.control is not None and self.control.controls(st.config_id):  # the back holds partners
            return min(len(self.orders[st.config_id]), self.control.limit(st.config_id, st.slot))
        return len(self.orders[st.config_id])


@dataclass(frozen=True)
class ClaimRow:
    benchmark: str
    model_a: str
    model_b: str
    config_id: str
    claim: str
    lower: float
    upper: float
    estimate: float  # the running mean difference over the items used
    items_used: int
    n_full: int


@dataclass(frozen=True)
class PairRow:
    benchmark: str
    model_a: str
    model_b: str
    verdict: str
    n_evaluations: int  # paired evaluations spent on this pair (configuration x item)
    n_full: int  # the full grid's: configurations x N
    deciding: tuple[str, ...]  # the configurations that decided it
    n_open: int  # configurations left undecided


@dataclass(frozen=True)
class CertifyResult:
    claims: list[ClaimRow]
    pairs: list[PairRow]
    evaluated: dict[tuple[str, str, str], np.ndarray]  # (benchmark, config, model) -> item ids evaluated, in order
    paired_evaluations: int
    model_evaluations: int
    full_paired_evaluations: int
    full_model_evaluations: int
    seconds: float
    stopped_by: str  # "answered", "budget", "exhausted", "held" (held_only: records read), "interrupted", "running"
    alpha_each: float  # subset: each sequence's level (the union bound); population: the closed test's first step
    options: CertifyOptions
    family_size: int = 0  # pair x configuration claims alpha covers (the evaluated ones and family_configs')
    control: dict = field(default_factory=dict)  # benchmark -> what the control did (--control auto)


def claim_of(lower: float, upper: float, exact: bool, estimate: float, delta: float) -> str:
    """A configuration's claim from its confidence bounds (or its exact difference once every item is in)."""
    if exact:
        if estimate > 0:
            return "a_better"
        if estimate < 0:
            return "b_better"
        return "within_delta" if delta > 0 else "undecided"
    if lower > 0:
        return "a_better"
    if upper < 0:
        return "b_better"
    if lower > -delta and upper < delta:
        return "within_delta"
    return "undecided"


def pair_decision(claims: Sequence[str]) -> str:
    wins_a, wins_b = "a_better" in claims, "b_better" in claims
    if wins_a and wins_b:
        return "flip"
    if "undecided" in claims:
        return "undecided"
    if wins_a:
        return "stable_a"
    if wins_b:
        return "stable_b"
    return "equivalent"


MIN_AUTO_BATCH = 4  # items a round at least, automatic batches (a call's overhead is worth a few items)
MAX_AUTO_BATCH = 50  # N / 30 is 667 items a round on a 20,000-item pool, far past where most claims end


def _batch(options: CertifyOptions, n: int) -> int:
    return options.batch if options.batch > 0 else min(max(MIN_AUTO_BATCH, math.ceil(n / 30)), MAX_AUTO_BATCH)


def family_size(problems: Sequence[BenchmarkProblem]) -> int:
    """The pair x configuration claims alpha covers: every configuration evaluated or looked at."""
    return sum(len(model_pairs(p.models)) * (len(p.config_ids) + len(p.family_configs)) for p in problems)


def _setup(
    problems: Sequence[BenchmarkProblem],
    options: CertifyOptions,
    cost_of: Callable[[str, str, str], float | None] | None = None,
) -> tuple[list[_Bench], float]:
    family = max(family_size(problems), 1)
    alpha_each = options.alpha / family  # subset: each two-sided sequence; population: a two-sided claim's first step
    benches = []
    for p in problems:
        order = np.array(p.item_ids, dtype=object)
        if options.order == "seeded":
            rng = np.random.default_rng([options.seed, zlib.crc32(p.benchmark.encode())])
            order = order[rng.permutation(len(p.item_ids))]
        pairs = model_pairs(p.models)
        orders, evidence = {}, {}
        bank = None
        if options.target == "population" and p.closer_to is None:
            # one bank for every configuration's pairs: a draw across configurations is one update
            bank = IidBettingCS(
                len(pairs) * len(p.config_ids), alpha_each / 2, -1.0, 1.0, extra=population_candidates(options.delta)
            )
        for k, cid in enumerate(p.config_ids):
            skip = p.excluded.get(cid, frozenset())
            orders[cid] = np.array([i for i in order if i not in skip], dtype=object) if skip else order
            evidence[cid] = PairedEvidence(
                p.closer_to,
                len(pairs),
                len(orders[cid]),
                options.target,
                alpha_each / 2,
                options.delta,
                p.lattice,
                shared=None if bank is None else (bank, k * len(pairs)),
            )
        streams = [
            _Stream(p.benchmark, pair, cid, i, slot)
            for i, (slot, pair, cid) in enumerate(
                (slot, pair, cid) for slot, pair in enumerate(pairs) for cid in p.config_ids
            )
        ]
        bench = _Bench(p, orders, evidence, streams, pairs, {pair: "undecided" for pair in pairs})
        bench.content = options.reading == "content"
        twins = pairings(p.closer_to, p.config_ids, p.excluded) if uses_twins(options.control) else {}
        if twins and not options.held_only:  # issue 45
            bench.control = (
                Control(
                    p.benchmark,
                    twins,
                    order,
                    pairs,
                    alpha_each / 2,
                    options.delta,
                    _pool_order(p, options),
                    cost_of if options.control == "time" else None,
                )
                if options.target == "population"
                else SubsetControl(p.benchmark, twins, order, pairs, alpha_each / 2, p.lattice)
            )
        benches.append(bench)
    return benches, alpha_each


def _pool_order(p: BenchmarkProblem, options: CertifyOptions) -> list[str]:
    """The pool beyond the subset in a seeded random order: partners are i.i.d. draws, whatever order it came in."""
    rng = np.random.default_rng([options.seed, zlib.crc32(p.benchmark.encode()), 1])
    return [p.pool[i] for i in rng.permutation(len(p.pool))]


def _allocation(b: _Bench, options: CertifyOptions) -> dict[int, tuple[int, bool]]:
    """Stream index -> (items to draw this round, whether it could reverse its pair), before costs and budget."""
    size = _batch(options, len(b.problem.item_ids))
    out: dict[int, tuple[int, bool]] = {}
    for pair in b.pairs:
        if b.verdict[pair] != "undecided":
            continue
        mine = [s for s in b.streams if s.pair == pair]
        open_ = [s for s in mine if s.claim == "undecided" and b.t(s) < b.n(s)]
        claims = {s.claim for s in mine}
        lean = 0
        if options.allocation == "reversal_first":
            lean = (
                1
                if "a_better" in claims and "b_better" not in claims
                else -1
                if "b_better" in claims and "a_better" not in claims
                else 0
            )
        for s in open_:
            t = b.t(s)
            running = float(b.evidence[s.config_id].running()[0][s.slot])  # theta so far
            reverses = bool(lean) and np.sign(running) == -lean
            out[s.index] = (min(size * (REVERSAL_BOOST if reverses else 1), b.n(s) - t), reverses)
    return out


def items_to_decide(t: int, mean: float, variance: float, n: int, log_inv_alpha: float, delta: float) -> float:
    """About how many items a stream needs in all before its claim is made: the sooner of a win (its
    difference, optimistic by one standard error while few items are in) and within_delta (pessimistic
    by the same), never more than the whole subset. A planning heuristic, not part of the guarantee."""
    v = max(variance, 0.01)
    se = math.sqrt(v / max(t, 1))
    d_win = min(1.0, abs(mean) + se)
    need = 2 * v * log_inv_alpha / d_win**2 + log_inv_alpha / d_win
    inside = delta - (abs(mean) + se)
    if inside > 0:
        need = min(need, 2 * v * log_inv_alpha / inside**2 + log_inv_alpha / inside)
    return float(min(need, n))


def _plan(benches: list[_Bench], options: CertifyOptions, oracle: Oracle) -> dict[tuple[int, int], int]:
    """This round's draws, {(bench, stream): items}, in the order they are worth taking (module docstring)."""
    if options.allocation == "flip_hunt":
        return _hunt(benches, options, oracle)
    cost_of, held_of = oracle.cost, oracle.held  # the Oracle protocol's (its defaults: unknown, none held)
    log_inv_alpha = _log_inv_alpha(benches, options)
    # (expected seconds to decide, this round's seconds, position, (bench, stream), items)
    ranked: list[tuple[float, float, int, tuple[int, int], int]] = []
    for bi, b in enumerate(benches):
        for s, (k, reverses) in _allocation(b, options).items():
            st = b.streams[s]
            n, t = b.n(st), b.t(st)
            free = _free_ahead(b, st, t, held_of)
            if free:  # what costs nothing is taken whole, before anything is paid for
                k = min(free, n - t)
            elif options.held_only:
                continue
            per_item, now = _stream_cost(b, st, k, cost_of, held_of)
            if options.allocation == "uniform":
                ranked.append((0.0, now, len(ranked), (bi, s), k))
                continue
            running, spread = b.evidence[st.config_id].running()
            mean, variance = float(running[st.slot]), float(spread[st.slot])
            if b.control is not None and b.control.controls(st.config_id):  # priced after the control (issue 45)
                per_item, now, variance = _control_price(b, st, t + k, per_item, now, variance, cost_of)
            need = max(items_to_decide(t, mean, variance, n, log_inv_alpha, options.delta) - t, 1.0)
            worth = 0.0 if now == 0 else per_item * need / (REVERSAL_BOOST if reverses else 1)
            ranked.append((worth, now, len(ranked), (bi, s), k))
    ranked.sort(key=lambda r: (r[0], r[2]))
    return _fill([(now, key, k) for _, now, _, key, k in ranked], options.round_seconds)


def _fill(ranked: list[tuple[float, tuple[int, int], int]], round_seconds: float | None) -> dict[tuple[int, int], int]:
    """Take (this round's seconds, stream, items) in order until the round's seconds are spent (all of them
    without a cap); a stream too dear for what is left is passed over for a cheaper one further down."""
    plan: dict[tuple[int, int], int] = {}
    spent = 0.0
    for now, key, k in ranked:
        if round_seconds is not None and plan and now > 0 and spent + now > round_seconds:
            continue
        plan[key] = k
        spent += now
    return plan


def _log_inv_alpha(benches: list[_Bench], options: CertifyOptions) -> float:
    return math.log(1 / (options.alpha / max(family_size([b.problem for b in benches]), 1)))


def _stream_cost(b: _Bench, st: _Stream, k: int, cost_of, held_of) -> tuple[float, float]:
    """(what one more paired item of the stream costs, what its next k items cost this round): the oracle's
    seconds per item of each model (1 when it does not say), nothing for items drawn already or held."""
    per_item, now = 0.0, 0.0
    t, order = b.t(st), b.orders[st.config_id]
    for model in st.pair:
        c = cost_of(b.problem.benchmark, st.config_id, model) if cost_of is not None else None
        c = 1.0 if c is None else max(float(c), 1e-6)
        have = b.drawn.get((model, st.config_id), 0)
        upto = t + k
        new = list(order[have:upto]) if upto > have else []
        free = held_of(b.problem.benchmark, st.config_id, model, new) if (held_of and new) else 0
        per_item += c
        now += c * (len(new) - free)
    return per_item, now


class _Route(NamedTuple):
    """One open stream's prices in _hunt: to its own verdict, and to each win a flip still needs."""

    stream: _Stream
    decide: float  # expected cost to the stream's claim
    hunt: dict[int, float]  # direction -> expected cost to that win (a batch at least, over its odds)
    need: float  # expected items still to its claim


class _Ranked(NamedTuple):
    """A stream planned this round, in the order rounds serve them."""

    pair_cost: float  # its pair's expected cost to a verdict
    own: float  # the stream's own share of it
    position: int  # ties keep the planning order
    now: float  # this round's seconds for it
    key: tuple[int, int]  # (benchmark, stream)
    k: int  # its items this round


def _hunt(benches: list[_Bench], options: CertifyOptions, oracle) -> dict[tuple[int, int], int]:
    """Flip hunting (module docstring): free items first, in a round of their own; then, per open pair, the
    cheaper of its two routes to a verdict: the configuration likeliest to give the minority's win (then
    the other's) at the lowest cost, or every open configuration (stable, equivalent); pairs in order of
    their expected cost to a verdict."""
    cost_of, held_of = oracle.cost, oracle.held
    size = {bi: _batch(options, len(b.problem.item_ids)) for bi, b in enumerate(benches)}
    open_pairs = [
        (bi, [s for s in b.streams if s.pair == pair])
        for bi, b in enumerate(benches)
        for pair in b.pairs
        if b.verdict[pair] == "undecided"
    ]
    free = {}
    for bi, mine in open_pairs:
        b = benches[bi]
        for s in mine:
            ahead = min(_free_ahead(b, s, b.t(s), held_of), b.n(s) - b.t(s)) if s.claim == "undecided" else 0
            if ahead > 0:
                free[(bi, s.index)] = ahead
    if free or options.held_only:  # plan what was learnt from them before paying for anything
        return free
    log_inv_alpha = _log_inv_alpha(benches, options)
    ranked: list[_Ranked] = []
    for bi, mine in open_pairs:
        b = benches[bi]
        needed = [d for d, claim in ((1, "a_better"), (-1, "b_better")) if claim not in {s.claim for s in mine}]
        rows: list[_Route] = []
        for s in mine:
            t, n = b.t(s), b.n(s)
            if s.claim != "undecided" or t >= n:
                continue
            running, spread = b.evidence[s.config_id].running()
            mean, variance = float(running[s.slot]), float(spread[s.slot]) if t >= 2 else PLAN_VARIANCE
            if b.problem.closer_to is not None:  # theta bounded from two shares' sequences: wider
                variance = max(variance, CLOSENESS_VARIANCE)
            per_item, _ = _stream_cost(b, s, 1, cost_of, None)
            if b.control is not None and b.control.controls(s.config_id):  # priced after the control (issue 45)
                per_item, _, variance = _control_price(b, s, t + 1, per_item, 0.0, variance, cost_of)
            need = max(items_to_decide(t, mean, variance, n, log_inv_alpha, options.delta) - t, 1.0)
            decide = per_item * need
            exact = options.target == "subset"
            odds = {d: win_odds(t, mean, variance, n, log_inv_alpha, d, exact) for d in needed}
            # a stream is fed a batch at a time: a win expected in fewer items still costs one batch
            least = min(size[bi], n - t)
            hunt = {d: per_item * max(items - t, least) / max(p, 1e-9) for d, (p, items) in odds.items()}
            rows.append(_Route(s, decide, hunt, need))
        if not rows:
            continue
        stable = sum(r.decide for r in rows)
        best = {d: min(r.hunt[d] for r in rows) for d in needed}
        flip = sum(best.values())
        hunting = flip < stable
        if hunting:
            # the minority's win (the dearer one) first, alone: without it the other win buys no flip
            minority = max(needed, key=lambda d: best[d])
            row = min(rows, key=lambda r: r.hunt[minority])
            picks = [(row.stream, best[minority], row.need)]
            pair_cost = flip
        else:
            picks = [(r.stream, r.decide, r.need) for r in rows]
            pair_cost = stable
        for s, own, need in picks:
            k = min(_hunt_batch(size[bi], b.t(s), hunting=hunting), b.n(s) - b.t(s))
            if options.batch == 0 and not hunting:
                # an automatic batch plans no further than the claim the stream expects (optimistic while few
                # items are in): at 50 items a round, claims of 100-300 items overshot by a quarter (issue 56)
                k = min(k, max(MIN_AUTO_BATCH, math.ceil(need)))
            _, now = _stream_cost(b, s, k, cost_of, held_of)
            if b.control is not None and b.control.controls(s.config_id):  # the cheap twin's items too
                _, now, _ = _control_price(b, s, b.t(s) + k, 0.0, now, 0.0, cost_of)
            ranked.append(_Ranked(pair_cost, own, len(ranked), now, (bi, s.index), k))
    ranked.sort(key=lambda r: (r.pair_cost, r.own, r.position))
    # pairs far dearer than the cheapest open one wait: what is learnt may end the cheap ones first
    cheapest = ranked[0].pair_cost if ranked else 0.0
    ranked = [r for r in ranked if r.pair_cost <= PAIR_RANGE * cheapest]
    return _fill([(r.now, r.key, r.k) for r in ranked], options.round_seconds)


def _hunt_batch(size: int, t: int, hunting: bool) -> int:
    """A stream's items this round: a first look while hunting is half a batch (enough to see which way it
    points), after which the stream goes back on the batch grid (multiples of `size`)."""
    if t == 0 and hunting:
        return max(1, size // 2)
    return size - t % size if t < size else size


def win_odds(
    t: int, mean: float, variance: float, n: int, log_inv_alpha: float, direction: int, exact_at_n: bool = False
) -> tuple[float, float]:
    """(the chance that a stream ends in a win in `direction` (+1: a_better, -1: b_better), about how many
    items it needs in all for that win). Its difference is read as normal around the running mean, shrunk
    towards 0 by a prior of sd PLAN_PRIOR_SD while few items are in; a win needs the difference past the
    smallest one its n items can certify (0 with `exact_at_n`: the subset target knows its sign at n).
    A planning heuristic, not part of the guarantee."""
    v = max(variance, 0.01)
    precision = t / v + 1 / PLAN_PRIOR_SD**2
    sd = precision**-0.5
    centre = direction * mean * (t / v) / precision
    lia = log_inv_alpha
    smallest = 0.0 if exact_at_n else (lia + math.sqrt(lia**2 + 8 * n * v * lia)) / (2 * n)  # need(smallest) = n
    p = 0.5 * math.erfc(-(centre - smallest) / (sd * math.sqrt(2)))
    plausible = min(max(centre + sd, smallest, 1e-3), 1.0)
    return p, float(min(2 * v * log_inv_alpha / plausible**2 + log_inv_alpha / plausible, n))


def _control_price(
    b: _Bench, st: _Stream, upto: int, per_item: float, now: float, variance: float, cost_of
) -> tuple[float, float, float]:
    """A controlled costly stream's (seconds per item, this round's seconds, variance): its difference's variance
    after the control, and the cheap twin's items its path asks for (the cheap score on each costly item, and
    the partners while it takes them) added to what an item and the round cost."""
    assert b.control is not None
    variance, cheap_per_item = b.control.price(st.config_id, st.slot, variance)
    twin = b.control.twins[st.config_id]
    prefix, extra = b.control.needs(st.config_id, st.slot, upto)
    evaluated = {m: set(b.control.extra.get((m, twin), ())) for m in st.pair}
    for model in st.pair:
        c = cost_of(b.problem.benchmark, twin, model) if cost_of is not None else None
        c = 1.0 if c is None else max(float(c), 1e-6)
        per_item += c * cheap_per_item
        now += c * sum(max(u - b.drawn.get((m, twin), 0), 0) for m, _, u in prefix if m == model)
        now += c * sum(len([i for i in items if i not in evaluated[m]]) for m, _, items in extra if m == model)
    return per_item, now, variance


def _free_ahead(b: _Bench, st: _Stream, t: int, held_of) -> int:
    """How many items from the stream's position on cost nothing for both of its models: drawn already
    (for another pair), or held by the oracle from earlier records."""
    free = None
    for model in st.pair:
        have = b.drawn.get((model, st.config_id), 0)
        ahead = max(have - t, 0)
        ahead += held_of(b.problem.benchmark, st.config_id, model, b.orders[st.config_id][max(have, t) :].tolist())
        free = ahead if free is None else min(free, ahead)
    return free or 0


def _trim(alloc: dict[tuple[int, int], int], left: int | None) -> dict[tuple[int, int], int]:
    """Keep the round inside the remaining budget: whole batches in order, the last one cut."""
    if left is None:
        return alloc
    out = {}
    for key, k in alloc.items():
        if left <= 0:
            break
        out[key] = min(k, left)
        left -= out[key]
    return out


def certify(
    problems: Sequence[BenchmarkProblem],
    oracle: Oracle | Scores,
    options: CertifyOptions,
    progress: Callable[[str], None] | None = None,
    checkpoint: Callable[[CertifyResult], None] | None = None,
    checkpoint_seconds: float = 600.0,
) -> CertifyResult:
    """Run certification to its answer or its budget; see the module docstring.

    `checkpoint`, when given, receives the result as of the last finished round (stopped_by "running")
    at most every `checkpoint_seconds`, between rounds and, with an oracle that calls `tick`, between its
    calls inside a round, so a long run can be saved as it goes. An interrupt (Ctrl-C) ends the run with
    the result as of the last finished round (stopped_by "interrupted"). `oracle`: an Oracle (oracle.py), or
    a bare scoring function, which gets the protocol's defaults."""
    oracle = as_oracle(oracle)
    if options.allocation not in ALLOCATIONS:
        raise ValueError(f"allocation {options.allocation!r}: one of {', '.join(ALLOCATIONS)}")
    if options.order not in ORDERS:
        raise ValueError(f"order {options.order!r}: one of {', '.join(ORDERS)}")
    if options.target not in TARGETS:
        raise ValueError(f"target {options.target!r}: one of {', '.join(TARGETS)}")
    if options.control not in CONTROLS:
        raise ValueError(f"control {options.control!r}: one of {', '.join(CONTROLS)}")
    if options.reading not in READINGS:
        raise ValueError(f"reading {options.reading!r}: one of {', '.join(READINGS)}")
    if options.reading == "content" and uses_twins(options.control):
        raise ValueError("the content reading certifies every configuration on its own items: no control variate")
    if uses_twins(options.control) and options.order == "subset" and not options.held_only:
        # partner items come from the back of the order: a fixed order along which a twin drifts makes them
        # unlike the front, and the control's claims false (issue 53); only a random order keeps them alike
        raise ValueError("the control variate's partner items need a random item order: order 'seeded', not 'subset'")
    benches, alpha_each = _setup(problems, options, oracle.cost)
    cache: dict[tuple[str, str, str], dict[str, float]] = {}
    run = _RunState(saved=time.monotonic())
    start = time.monotonic()
    work = oracle.work_clock  # the oracle's clock of model work (a live run: CPU seconds), or None: wall time

    def result(stopped_by: str) -> CertifyResult:
        seconds = run.wall or time.monotonic() - start
        return _result(benches, run.paired, seconds, stopped_by, alpha_each, options)

    def tick() -> None:
        if checkpoint is not None and time.monotonic() - run.saved >= checkpoint_seconds:
            checkpoint(result("running"))
            run.saved = time.monotonic()

    stopped_by = "answered"
    round_no = 0
    try:
        while True:
            plan = {key: k for key, k in _plan(benches, options, oracle).items() if k > 0}
            if not plan:
                answered = all(v != "undecided" for b in benches for v in b.verdict.values())
                stopped_by = "answered" if answered else "held" if options.held_only else "exhausted"
                break
            left = None if options.budget_evaluations is None else options.budget_evaluations - run.paired
            if (left is not None and left <= 0) or (
                options.budget_seconds is not None and run.spent >= options.budget_seconds
            ):
                stopped_by = "budget"
                break
            plan = _trim(plan, left)
            round_no += 1
            run.round_start = time.monotonic()
            work_before = work()
            seconds_left = None if options.budget_seconds is None else options.budget_seconds - run.spent
            _evaluate(benches, plan, oracle, cache, seconds_left, tick)
            # the oracle's model-work clock where it keeps one (a live run: CPU seconds), else wall time
            wall = time.monotonic() - run.round_start
            run.wall += wall
            run.spent += wall if work_before is None else (work() or 0.0) - work_before
            run.round_start = None
            plan = _available(benches, plan)
            if not plan:  # the oracle stopped at the budget before this round's first items
                stopped_by = "budget"
                break
            run.paired += sum(plan.values())
            for bi, b in enumerate(benches):
                mine = {s: k for (i, s), k in plan.items() if i == bi}
                if mine:
                    _advance(b, mine, cache)
            _read_claims(benches, options, alpha_each)
            if progress is not None:
                open_pairs = sum(v == "undecided" for b in benches for v in b.verdict.values())
                progress(
                    f"round {round_no}: {run.paired:,} paired evaluations, {open_pairs} pair(s) open, "
                    f"{run.wall:.0f} s evaluating"
                    + ("" if work_before is None else f" ({run.spent:.0f} s of model work)")
                )
            tick()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (the CLI raises it as an interrupt)
        stopped_by = "interrupted"
        if run.round_start is not None:  # the round it cut short counts as spent
            run.wall += time.monotonic() - run.round_start
            if work() is None:
                run.spent += time.monotonic() - run.round_start
        # what the oracle answered is in its records (a rerun resumes from them); the sequences hold what
        # was fed to them, valid at whatever size each reached
    return result(stopped_by)


@dataclass
class _RunState:
    """What the rounds carry from one to the next."""

    saved: float  # when the last checkpoint was written (monotonic clock)
    paired: int = 0  # paired evaluations fed to the sequences
    spent: float = 0.0  # the budget's seconds spent (model work, or wall time)
    wall: float = 0.0  # wall seconds of the rounds' evaluation (CertifyResult.seconds)
    round_start: float | None = None  # while a round evaluates


def _result(
    benches: list[_Bench], paired: int, seconds: float, stopped_by: str, alpha_each: float, options: CertifyOptions
) -> CertifyResult:
    claims, pairs = _rows(benches)
    evaluated = {}
    for b in benches:
        for (model, cid), n in b.drawn.items():
            evaluated[(b.problem.benchmark, cid, model)] = b.orders[cid][:n]
        if b.control is not None:  # the cheap twins' partner items, beyond their own prefix
            for (model, cid), extra in b.control.extra.items():
                key = (b.problem.benchmark, cid, model)
                have = evaluated.get(key, np.array([], dtype=object))
                more = [i for i in dict.fromkeys(extra) if i not in set(have)]
                evaluated[key] = np.concatenate([have, np.array(more, dtype=object)])
    full_paired = sum(len(b.pairs) * sum(len(o) for o in b.orders.values()) for b in benches)
    full_model = sum(len(b.problem.models) * sum(len(o) for o in b.orders.values()) for b in benches)
    return CertifyResult(
        claims,
        pairs,
        evaluated,
        paired,
        sum(len(v) for v in evaluated.values()),
        full_paired,
        full_model,
        seconds,
        stopped_by,
        alpha_each,
        options,
        family_size([b.problem for b in benches]),
        {b.problem.benchmark: b.control.summary() for b in benches if b.control is not None},
    )


def _evaluate(
    benches: list[_Bench],
    plan: dict[tuple[int, int], int],
    oracle: Oracle,
    cache: dict,
    seconds_left: float | None = None,
    tick: Callable[[], None] | None = None,
) -> None:
    """Ask the oracle once per (model, configuration) for the items this round needs that it lacks: the
    round's requests together, [(benchmark, config_id, model, item_ids)] (`Oracle.evaluate_many`: the live
    oracle groups them by model, and may answer a prefix of a request's items only, nothing even, when the
    evaluation budget ran out during the round; it calls `tick()` between its calls, for the checkpoints)."""
    wanted: dict[tuple[int, str, str], int] = {}
    extras = _control_needs(benches, plan, wanted)  # the cheap twins' items first (issue 45)
    for (bi, s), k in plan.items():
        b = benches[bi]
        stream = b.streams[s]
        upto = b.t(stream) + k
        for model in stream.pair:
            key = (bi, model, stream.config_id)
            wanted[key] = max(wanted.get(key, 0), upto)
    requests: list[tuple[int, str, str, int | None, list]] = []
    for (bi, model, cid), upto in wanted.items():
        b = benches[bi]
        have = b.drawn.get((model, cid), 0)
        held = cache.get((b.problem.benchmark, cid, model), {})
        if have < upto and b.orders[cid][have] in held:  # scored already: a control's partner item (issue 45)
            while have < upto and b.orders[cid][have] in held:
                have += 1
            b.drawn[(model, cid)] = have
        if upto > have:
            requests.append((bi, model, cid, have, list(b.orders[cid][have:upto])))
    for bi, model, cid, items in extras:
        held = cache.get((benches[bi].problem.benchmark, cid, model), {})
        todo = [i for i in items if i not in held]
        if todo:
            requests.append((bi, model, cid, None, todo))
    asked = [(benches[bi].problem.benchmark, cid, model, items) for bi, model, cid, _, items in requests]
    answers = oracle.evaluate_many(asked, seconds_left, tick=tick)
    for (bi, model, cid, start, items), scores in zip(requests, answers, strict=True):
        b = benches[bi]
        scores = np.asarray(scores, dtype=float)
        if len(scores) > len(items):
            raise ValueError(f"the oracle answered {len(scores)} scores for {len(items)} items ({model}, {cid})")
        store = cache.setdefault((b.problem.benchmark, cid, model), {})
        store.update(zip(items[: len(scores)], scores, strict=True))
        if start is None:  # a control's partner items, outside the configuration's prefix
            assert b.control is not None
            b.control.record_extra(model, cid, items[: len(scores)])
        else:
            b.drawn[(model, cid)] = start + len(scores)


def _control_needs(
    benches: list[_Bench], plan: dict[tuple[int, int], int], wanted: dict[tuple[int, str, str], int]
) -> list[tuple[int, str, str, list]]:
    """Put into `wanted` the cheap twins' prefixes the planned costly streams' control paths need, and return
    their partner items to evaluate, [(bench, model, cheap configuration, items)]."""
    extras = []
    for (bi, s), k in plan.items():
        b = benches[bi]
        st = b.streams[s]
        if b.control is None or not b.control.controls(st.config_id):
            continue
        prefix, extra = b.control.needs(st.config_id, st.slot, b.t(st) + k)
        for model, cid, upto in prefix:
            wanted[(bi, model, cid)] = max(wanted.get((bi, model, cid), 0), upto)
        extras += [(bi, model, cid, items) for model, cid, items in extra]
    return extras


def _available(benches: list[_Bench], plan: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """The plan cut to the items both models of each stream were scored on (all of it, unless the
    oracle stopped early at the budget)."""
    out = {}
    for (bi, s), k in plan.items():
        b = benches[bi]
        st = b.streams[s]
        have = min(b.drawn.get((model, st.config_id), 0) for model in st.pair) - b.t(st)
        if min(k, have) > 0:
            out[(bi, s)] = min(k, have)
    return out


def _advance(b: _Bench, plan: dict[int, int], cache: dict) -> None:
    """Feed each planned stream its new items, one draw at a time across a configuration's pairs."""
    by_config: dict[str, dict[int, int]] = {}
    for s, k in plan.items():
        by_config.setdefault(b.streams[s].config_id, {})[s] = k
    for j in range(max(plan.values())):  # draw by draw, every configuration's j-th draw together
        rows, values, bank = [], [], None
        for cid, mine in by_config.items():
            now = [b.streams[s] for s, k in mine.items() if j < k]
            if not now:
                continue
            ev, order = b.evidence[cid], b.orders[cid]
            a, m = (
                np.array([cache[(b.problem.benchmark, cid, st.pair[side])][order[int(ev.t[st.slot])]] for st in now])
                for side in (0, 1)
            )
            if b.content:
                a, m = both_read(a, m)
            staged = ev.stage(np.array([st.slot for st in now]), a, m)
            if staged is not None:
                rows.append(staged[0])
                values.append(staged[1])
                bank = ev.bank
        if bank is not None:
            bank.update(np.concatenate(rows), np.concatenate(values))
    if b.control is not None:  # --control (issue 45): the paths take what is scored now
        b.control.catch_up(cache)


def _read_claims(benches: list[_Bench], options: CertifyOptions, alpha_each: float) -> None:
    """Every stream's claim from its sequence (subset: its bounds at alpha_each; population: the closed test
    over the whole family), then every pair's verdict."""
    if options.target == "subset":
        for b in benches:
            for cid, ev in b.evidence.items():
                r = ev.reading() if b.control is None else b.control.reading(cid, ev)  # --control
                for st in (st for st in b.streams if st.config_id == cid and ev.t[st.slot] > 0):
                    st.claim = claim_of(
                        float(r.lower[st.slot]),
                        float(r.upper[st.slot]),
                        bool(r.exact[st.slot]),
                        _rounded(r.estimate[st.slot]),
                        options.delta,
                    )
    else:
        blocks, owners = [], []
        for b in benches:
            for cid, ev in b.evidence.items():
                blocks.append(ev.p_values() if b.control is None else b.control.p_values(cid, ev))  # --control
                owners.append((b, cid))
        unevaluated = sum(len(model_pairs(b.problem.models)) * len(b.problem.family_configs) for b in benches)
        blocks.append(np.ones((unevaluated, 4)))
        p_values = np.concatenate(blocks) if blocks else np.ones((0, 4))
        if options.familywise == "bonferroni":  # the union bound's level, for comparison (perf/certify_power.py)
            rejected = p_values <= options.alpha / max(2 * len(p_values), 1)
        else:
            rejected = closed_test(p_values, options.alpha)
        at = 0
        for (b, cid), block in zip(owners, blocks, strict=False):
            claims = claims_from_rejections(rejected[at : at + len(block)])
            at += len(block)
            for st in b.streams:
                if st.config_id == cid:
                    st.claim = claims[st.slot]
    for b in benches:
        for pair in b.pairs:
            b.verdict[pair] = pair_decision([s.claim for s in b.streams if s.pair == pair])


def _rounded(x: float) -> float:
    return round(float(x), 12)  # sums of lattice values: 0 as a fraction is 0


def _rows(benches: list[_Bench]) -> tuple[list[ClaimRow], list[PairRow]]:
    claims, pairs = [], []
    for b in benches:
        readings = {
            cid: ev.reading() if b.control is None else b.control.reading(cid, ev) for cid, ev in b.evidence.items()
        }
        for st in b.streams:
            t, r = b.t(st), readings[st.config_id]
            claims.append(
                ClaimRow(
                    b.problem.benchmark,
                    *st.pair,
                    st.config_id,
                    st.claim,
                    float(r.lower[st.slot]),
                    float(r.upper[st.slot]),
                    _rounded(r.estimate[st.slot]) if t else float("nan"),
                    t,
                    b.n(st),
                )
            )
        for pair in b.pairs:
            mine = [s for s in b.streams if s.pair == pair]
            verdict = b.verdict[pair]
            # a flip (or an open pair) rests on its decided wins; a stable or equivalent verdict on every configuration
            deciding = tuple(
                s.config_id for s in mine if verdict not in ("flip", "undecided") or s.claim in ("a_better", "b_better")
            )
            pairs.append(
                PairRow(
                    b.problem.benchmark,
                    *pair,
                    verdict,
                    sum(b.t(s) for s in mine),
                    sum(len(b.orders[s.config_id]) for s in mine),  # the full grid's (a control's partners in)
                    deciding,
                    sum(s.claim == "undecided" for s in mine),
                )
            )
    return claims, pairs
