"""Which cheap configuration helps which costly one, and the paths that feed their control-variate e-processes
(`--control auto`): Control for the population target (partner items; the statistics and why they are built so:
sequential/control_variate.py), SubsetControl for the subset target (the twin's whole subset; its class docstring).

Pairing. A free-form configuration (costly: it generates text) is paired with the log-probability configuration
of the same benchmark, template and shots (its cheap twin, scored on the same prompt by log-likelihoods, about a
tenth of the cost), when the run certifies both and neither skips items (`--selection records`). CrowS-Pairs has
no free-form configurations.

A path per (costly configuration, pair of models). Both configurations draw the benchmark's one item order
(o_0, o_1, ...). Step j of the path takes the costly configuration's next item o_i from the front (both models'
scores on it, and the cheap configuration's), and, when the path's own past asks for partners
(ControlledBettingCS.partners_wanted), the next k items from the back of the order, o_{N-1}, o_{N-2}, ...,
scored by the cheap configuration only: first the items of a pool beyond the subset (`BenchmarkProblem.pool`, in a
seeded order: as many a step as the pool left spreads over the claim's expected steps, up to 16, PPI's use of the
twin on an unlabelled pool; with `--control time` no more than leave the least expected model time to the claim,
from the oracle's costs), then at most 2 a step and 50 items in all (2.5 % of the subset where that is fewer)
from the back of the order. Front and back never meet: the front stops where the back's partners begin, so a
partner item is never a costly item of its path, and the costly configuration's own evaluations (a prefix of
the order, as without the control) reach the back only when the path is spent. Which items a step uses is fixed
by the path's past, so the path is one sequence in a fixed order whatever the rounds did, and it reads only what
is already scored: a step waits for its items, it never decides otherwise because they are missing. Paths whose
r^2 stays under MIN_R2 after GIVE_UP steps take plain steps for good and stop asking for the cheap scores.

The cheap configuration's items on the front are its own prefix (it needs them for its own claims too); the
back's partners are extra items of it, evaluated when a planned costly step asks for them (`needs`) and kept
in `extra` (they are in the run's items.parquet, and its own stream takes them free when it gets there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from safetyrepro.sequential.confidence_sequence import WorBettingCS
from safetyrepro.sequential.control_variate import (
    CHANCE_R2,
    MAX_GAMMA,
    MIN_R2,
    WARM_UP,
    ControlledBettingCS,
    correlation,
    r_squared,
    slope,
)
from safetyrepro.sequential.evidence import PairedEvidence, Reading, population_candidates

CONTROLS = ("auto", "time", "none")  # auto: the fewest costly evaluations; time: the least model time; none


def uses_twins(control: str) -> bool:
    return control != "none"


GIVE_UP = 30  # steps after which a path whose r^2 is under MIN_R2 is plain for good (no more cheap scores asked)


Store = tuple[Mapping[str, float], Mapping[str, float], Mapping[str, float], Mapping[str, float]]


def _stores(
    benchmark: str,
    rows: Mapping[tuple[str, int], int],
    pairs: Sequence[tuple[str, str]],
    twins: Mapping[str, str],
    cache: Mapping[tuple[str, str, str], Mapping[str, float]],
) -> dict[int, Store]:
    """Per path row, the scores it reads: (costly a, costly b, cheap a, cheap b), item -> score."""
    empty: dict[str, float] = {}
    out = {}
    for (cid, slot), row in rows.items():
        a, b = pairs[slot]
        parts = [cache.get((benchmark, x, m), empty) for x in (cid, twins[cid]) for m in (a, b)]
        out[row] = (parts[0], parts[1], parts[2], parts[3])
    return out


def _scored(store: Store, item: str, plain: bool) -> bool:
    """Whether a path's step on `item` has its scores: the costly ones of both models, and, unless the path is
    plain for good, the cheap ones on it too."""
    da, db, ca, cb = store
    return item in da and item in db and (plain or (item in ca and item in cb))


class _Paths:
    """What both targets' paths share: a row per (costly configuration, pair), the benchmark's one item order,
    the costly differences' running sums (the reported estimate)."""

    def __init__(self, benchmark: str, twins: Mapping[str, str], order: np.ndarray, pairs: Sequence[tuple[str, str]]):
        self.benchmark, self.twins, self.order = benchmark, dict(twins), order
        self.pairs = list(pairs)
        self.N = len(order)
        self.row = {
            (cid, slot): k * len(pairs) + slot for k, cid in enumerate(self.twins) for slot in range(len(pairs))
        }
        self.key_of = {row: key for key, row in self.row.items()}  # row -> (costly configuration, pair slot)
        self.items = [str(i) for i in order]
        self.d_sum = np.zeros(len(self.row))  # sum of the costly differences used (the reported estimate)

    def controls(self, config_id: str) -> bool:
        return config_id in self.twins

    def _rows_and_estimate(self, config_id: str, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The configuration's rows, and per row the mean costly difference over its steps (`steps`: per row)."""
        rows = np.array([self.row[(config_id, slot)] for slot in range(len(self.pairs))])
        taken = steps[rows]
        return rows, np.where(taken > 0, self.d_sum[rows] / np.maximum(taken, 1), 0.0)

    def _summary(self, steps: np.ndarray, fit: np.ndarray, plain: np.ndarray) -> dict:
        """`fit`: per row the sums of d, c, d^2, c^2 and dc over its steps; `plain`: the rows that stopped reading
        the twin (no correlation found), whose later steps enter the sums with c = 0."""
        rows = np.array(sorted(self.row.values()), dtype=np.int64)
        kept = rows[(steps[rows] >= WARM_UP) & ~plain[rows]]  # a correlation on a few items says little
        r = correlation(fit[kept], steps[kept]) if len(kept) else np.array([])
        return {
            "pairs": {cid: twin for cid, twin in self.twins.items()},
            "costly_steps": int(steps[rows].sum()) if len(rows) else 0,
            "twin_r_median": round(float(np.median(r)), 3) if len(r) else None,  # over the paths that kept the twin
            "twin_kept_paths": len(kept),
            "twin_dropped_paths": int(plain[rows].sum()),
        }


class Control(_Paths):
    """The control-variate paths of one benchmark: a ControlledBettingCS row per (costly configuration, pair)."""

    def __init__(
        self,
        benchmark: str,
        twins: Mapping[str, str],
        order: np.ndarray,
        pairs: Sequence[tuple[str, str]],
        alpha_side: float,
        delta: float,
        pool: Sequence[str] = (),
        cost_of: Callable[[str, str, str], float | None] | None = None,
    ):
        super().__init__(benchmark, twins, order, pairs)
        self.delta = float(delta)
        # `--control time`: the oracle's seconds per item (benchmark, configuration, model), None while unknown
        self.cost_of = cost_of
        n = len(self.row)
        self.P = len(pool)  # items beyond the subset, scored by the twins only: partners first come from them
        self.source = [str(i) for i in pool] + self.items[::-1]  # where partners come from, in the order taken
        self.bank = ControlledBettingCS(
            n, alpha_side, extra=population_candidates(delta), delta=delta, beyond=self.P, subset=self.N
        )
        self.k = self.bank.k  # the most partners a step takes
        self.pos = np.zeros(n, dtype=np.int64)  # the next costly item, from the front
        self.back = np.zeros(n, dtype=np.int64)  # partner items taken from the source (the pool, then the back)
        self.plain = np.zeros(n, dtype=bool)  # given up: plain steps for good
        self.want = np.zeros(n, dtype=np.int64)  # partners the next step takes (decided from the row's past)
        self._p_cache: tuple[int, np.ndarray] | None = None
        self.extra: dict[tuple[str, str], list[str]] = {}  # (model, cheap configuration) -> partner items evaluated

    def limit(self, config_id: str, slot: int) -> int:
        """How far the path's front may go: where the back's partners begin."""
        return self.N - self._from_back(int(self.back[self.row[(config_id, slot)]]))

    def _decide(self, rows: np.ndarray) -> None:
        """Each row's choice for its next step (partners or not), from its own past: kept until it steps."""
        fresh = self.N - np.maximum(self.back[rows] - self.P, 0) - self.pos[rows]
        beyond = np.maximum(self.P - self.back[rows], 0)
        ratio = None if self.cost_of is None else self._cost_ratio(rows)
        self.want[rows] = np.where(self.plain[rows], 0, self.bank.partners_wanted(rows, fresh, beyond, ratio))

    def _cost_ratio(self, rows: np.ndarray) -> np.ndarray:
        """Per row, a twin item's cost over a costly item's, both models (NaN until the oracle knows both)."""
        assert self.cost_of is not None
        out = np.full(len(rows), np.nan)
        for i, row in enumerate(rows.tolist()):
            cid, slot = self.key_of[row]
            costly, cheap = (
                [self.cost_of(self.benchmark, c, m) for m in self.pairs[slot]] for c in (cid, self.twins[cid])
            )
            known = [c for c in (*costly, *cheap) if c is not None]
            if len(known) == 4 and sum(known[:2]) > 0:
                out[i] = sum(known[2:]) / sum(known[:2])
        return out

    def _from_back(self, taken: int) -> int:
        """Of `taken` partner items, how many came from the subset's back (the pool's come first)."""
        return max(taken - self.P, 0)

    def _partners(self, row: int, steps: int = 1, k: int | None = None) -> list[str]:
        """The next `steps` x k partner items for this row (k: its next step's), in the order they are taken: the
        pool's, then the back's, never past its costly front."""
        start = int(self.back[row])
        k = int(self.want[row]) if k is None else k
        stop = min(start + k * steps, len(self.source) - int(self.pos[row]) - 1)  # the front's next item stays
        return self.source[start:stop]

    def catch_up(self, cache: Mapping[tuple[str, str, str], Mapping[str, float]]) -> None:
        """Take every step whose items are scored, all rows together, until none is ready."""
        stores = _stores(self.benchmark, self.row, self.pairs, self.twins, cache)
        rows = np.array(sorted(self.row.values()), dtype=np.int64)
        while len(rows):
            ready, d, c, partners = [], [], [], []
            for row in rows.tolist():
                pos = int(self.pos[row])
                if pos >= self.N - self._from_back(int(self.back[row])):
                    continue
                item = self.items[pos]
                da, db, ca, cb = stores[row]
                plain = bool(self.plain[row])
                if not _scored(stores[row], item, plain):
                    continue
                p = np.full(self.k, np.nan)
                if self.want[row]:
                    mates = self._partners(row)
                    if any(i not in ca or i not in cb for i in mates):
                        continue
                    p[: len(mates)] = [ca[i] - cb[i] for i in mates]
                ready.append(row)
                d.append(da[item] - db[item])
                c.append(0.0 if plain else ca[item] - cb[item])
                partners.append(p)
            if not ready:
                return
            r = np.array(ready, dtype=np.int64)
            taken = (~np.isnan(np.array(partners))).sum(axis=1)
            from_back = np.maximum(self.back[r] + taken - self.P, 0) - np.maximum(self.back[r] - self.P, 0)
            self.bank.update(r, np.array(d), np.array(c), np.array(partners), from_back)
            self.d_sum[r] += np.array(d)
            self.back[r] += taken
            self.pos[r] += 1
            # a path that found no correlation stops asking for the cheap scores (it is plain for good)
            self.plain[r] |= (self.bank.t[r] >= GIVE_UP) & (self.bank.r2(r) < MIN_R2)
            self._decide(r)
            rows = r

    def needs(
        self, config_id: str, slot: int, upto: int
    ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, list[str]]]]:
        """What the path of (configuration, pair) needs to use the costly items up to position `upto`, for both
        models: ([(model, cheap configuration, its prefix to reach)], [(model, cheap configuration, partner items)]):
        the cheap scores on those items, and, while the path takes partners, the partners of the steps to come."""
        row = self.row[(config_id, slot)]
        twin = self.twins[config_id]
        if self.plain[row]:
            return [], []
        upto = min(upto, self.N - self._from_back(int(self.back[row])))
        partners: list[str] = []
        steps = max(upto - int(self.pos[row]), 0)
        t = int(self.bank.t[row])
        soon = t < WARM_UP <= t + steps and float(self.bank.r2(np.array([row]))[0]) >= MIN_R2  # its warm-up ends
        k = max(int(self.want[row]), 1 if soon else 0)  # the steps to come take as many as the next (a guess)
        if steps and k:
            front = set(self.items[int(self.pos[row]) : upto])  # the costly items these steps take
            partners = [i for i in self._partners(row, steps, k) if i not in front]
        models = self.pairs[slot]
        return [(m, twin, upto) for m in models], [(m, twin, partners) for m in models if partners]

    def record_extra(self, model: str, config_id: str, items: Sequence[str]) -> None:
        self.extra.setdefault((model, config_id), []).extend(items)

    # what the claims and the planner read
    def p_values(self, config_id: str, evidence: PairedEvidence) -> np.ndarray:
        """(pairs, 4) anytime p-values of NOT_A, NOT_B, HI, LO (sequential/closed_testing.py): the control's rows
        for a costly configuration, the configuration's own evidence otherwise."""
        if not self.controls(config_id):
            return evidence.p_values()
        steps = int(self.bank.t.sum())  # the bank changes only when a row steps
        if self._p_cache is None or self._p_cache[0] != steps:
            cs, d = self.bank, self.delta
            log_e = np.stack([cs.log_e_above(0.0), cs.log_e_below(0.0), cs.log_e_below(d), cs.log_e_above(-d)], axis=1)
            self._p_cache = (steps, np.minimum(1.0, np.exp(-log_e)))
        return self._p_cache[1][[self.row[(config_id, slot)] for slot in range(len(self.pairs))]]

    def reading(self, config_id: str, evidence: PairedEvidence) -> Reading:
        if not self.controls(config_id):
            return evidence.reading()
        rows, estimate = self._rows_and_estimate(config_id, self.bank.t)
        lo, hi = self.bank.bounds(evidence.alpha_side)
        return Reading(lo[rows], hi[rows], estimate, np.zeros(len(rows), dtype=bool))

    def price(self, config_id: str, slot: int, variance: float) -> tuple[float, float]:
        """(the variance a costly step's difference has after the control, cheap items the path asks for per
        costly item: the cheap score on it unless the path is plain, and its partners while it takes them)."""
        row = self.row[(config_id, slot)]
        if self.plain[row]:
            return variance, 0.0
        k = int(self.want[row])
        if k:
            r2 = float(self.bank.r2(np.array([row]))[0])
            return variance * (1 - r2 * k / (k + 1)), 1.0 + k
        return variance, 1.0

    def summary(self) -> dict:
        """For cost.json: what the control did."""
        return {
            **self._summary(self.bank.t, self.bank.fit_dc, self.plain),
            "partner_steps": int(self.bank.partner_steps.sum()),
            "pool_beyond_subset": self.P,  # items beyond the costly subset the twins could score as partners
            "partner_items_evaluated": sum(len(v) for v in self.extra.values()),
        }


class SubsetControl(_Paths):
    """The control-variate paths of one benchmark under `--target subset`: a WorBettingCS row per (costly configuration,
    pair), fed from the scores as they arrive (catch_up), as Control's paths are.

    The subset target is the fixed subset's own difference, and once the cheap twin has scored every item of the
    subset (it is cheap), its mean over the items a path has not drawn yet is known exactly, so no partners are
    needed: the path bets on D - gamma (C - c_rest), whose mean given the past is the costly configuration's own
    remaining mean under uniform draws without replacement (sequential/confidence_sequence.py WorBettingCS.update,
    `gamma` and `deviation`). gamma is the least-squares slope of D on C over the path's earlier steps. Whether a
    step takes the control is fixed by the path's own past: from step WARM_UP on, while the running r^2 of D and C
    is at least MIN_R2 and beyond chance (CHANCE_R2 / steps); a path whose r^2 stays under MIN_R2 after GIVE_UP
    steps is plain for good and stops asking for the twin's scores. A step that takes the control waits until the
    twin has every item for both models; a step never decides otherwise because a score is missing."""

    def __init__(
        self,
        benchmark: str,
        twins: Mapping[str, str],
        order: np.ndarray,
        pairs: Sequence[tuple[str, str]],
        alpha_side: float,
        lattice: int | None,
    ):
        super().__init__(benchmark, twins, order, pairs)
        self.k = 0  # no partners
        n = len(self.row)
        # the two-sided sequence at 2 alpha_side, as the configuration's own (evidence.py, subset target)
        self.bank = WorBettingCS(n, self.N, 2 * alpha_side, -1.0, 1.0, lattice)
        self.fit = np.zeros((n, 5))  # sum d, c, d^2, c^2, dc over the steps taken
        self.c_drawn = np.zeros(n)  # sum of C over the items drawn
        self._c_total: dict[int, float] = {}  # per row, the twin's sum over the whole subset once it is scored
        self.plain = np.zeros(n, dtype=bool)  # given up: plain steps for good
        self.controlled_steps = np.zeros(n, dtype=np.int64)

    def limit(self, config_id: str, slot: int) -> int:
        return self.N

    def _r2(self, rows: np.ndarray) -> np.ndarray:
        return r_squared(self.fit[rows], np.maximum(self.bank.t[rows], 1))

    def wants(self, rows: np.ndarray) -> np.ndarray:
        """Whether each row's next step takes the control, from its own past only."""
        t = self.bank.t[rows]
        r2 = self._r2(rows)
        return (t >= WARM_UP) & (r2 >= np.maximum(MIN_R2, CHANCE_R2 / np.maximum(t, 1))) & ~self.plain[rows]

    def _gamma(self, rows: np.ndarray) -> np.ndarray:
        return np.clip(slope(self.fit[rows], np.maximum(self.bank.t[rows], 1)), -MAX_GAMMA, MAX_GAMMA)

    def catch_up(self, cache: Mapping[tuple[str, str, str], Mapping[str, float]]) -> None:
        """Take every step whose scores are in, all rows together, until none is ready."""
        stores = _stores(self.benchmark, self.row, self.pairs, self.twins, cache)
        c_total = self._c_total  # a score once in never changes: a twin found whole stays whole
        for row, (_, _, ca, cb) in stores.items():
            if row in c_total or len(ca) < self.N or len(cb) < self.N:
                continue
            if all(i in ca and i in cb for i in self.items):
                c_total[row] = float(sum(ca[i] - cb[i] for i in self.items))
        rows = np.array(sorted(self.row.values()), dtype=np.int64)
        while len(rows):
            want = self.wants(rows)
            ready, d, c, gamma, deviation, span = [], [], [], [], [], []
            for row, controlled in zip(rows.tolist(), want.tolist(), strict=True):
                pos = int(self.bank.t[row])
                if pos >= self.N:
                    continue
                item = self.items[pos]
                da, db, ca, cb = stores[row]
                plain = bool(self.plain[row])
                if not _scored(stores[row], item, plain):
                    continue
                if controlled and row not in c_total:
                    continue  # the twin's whole subset is needed: wait for it
                ready.append(row)
                d.append(da[item] - db[item])
                c.append(0.0 if plain else ca[item] - cb[item])
                rest = (c_total[row] - self.c_drawn[row]) / (self.N - pos) if controlled else 0.0
                gamma.append(float(self._gamma(np.array([row]))[0]) if controlled else 0.0)
                deviation.append(c[-1] - rest if controlled else 0.0)
                span.append(1.0 + abs(rest) if controlled else 0.0)
            if not ready:
                return
            r = np.array(ready, dtype=np.int64)
            d_arr, c_arr = np.array(d), np.array(c)
            self.bank.update(r, d_arr, np.array(gamma), np.array(deviation), np.array(span))
            self.d_sum[r] += d_arr
            self.c_drawn[r] += c_arr
            self.controlled_steps[r] += np.array(span) > 0
            self.fit[r] += np.stack([d_arr, c_arr, d_arr * d_arr, c_arr * c_arr, d_arr * c_arr], axis=1)
            self.plain[r] |= (self.bank.t[r] >= GIVE_UP) & (self._r2(r) < MIN_R2)
            rows = r

    def needs(
        self, config_id: str, slot: int, upto: int
    ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, list[str]]]]:
        """The twin's scores the path needs to use the costly items up to `upto`, for both models: its whole
        subset (from the first item on)."""
        row = self.row[(config_id, slot)]
        if self.plain[row]:
            return [], []
        twin = self.twins[config_id]
        # the twin's whole subset with the path's first items, so that its control can start at WARM_UP (a
        # round later it would start a batch later): the twin costs about a tenth of the path's items, and
        # with no correlation that tenth is the price (docs/certify.md)
        whole = upto > 0
        return [(m, twin, self.N if whole else upto) for m in self.pairs[slot]], []

    def record_extra(self, model: str, config_id: str, items: Sequence[str]) -> None:
        raise ValueError("the subset target's control takes no partner items")

    @property
    def extra(self) -> dict[tuple[str, str], list[str]]:
        return {}

    def p_values(self, config_id: str, evidence: PairedEvidence) -> np.ndarray:
        return evidence.p_values()  # the population target's; the subset target reads bounds

    def reading(self, config_id: str, evidence: PairedEvidence) -> Reading:
        if not self.controls(config_id):
            return evidence.reading()
        rows, estimate = self._rows_and_estimate(config_id, self.bank.t)
        bounds = self.bank.bounds()
        return Reading(bounds.lower[rows], bounds.upper[rows], estimate, bounds.exact[rows])

    def price(self, config_id: str, slot: int, variance: float) -> tuple[float, float]:
        """(the variance of a costly step's difference after the control, cheap items per costly item: the twin's
        score on it while the path reads the twin; its whole subset is a one-off, asked for by `needs`)."""
        row = self.row[(config_id, slot)]
        if self.plain[row]:
            return variance, 0.0
        if int(self.bank.t[row]) >= WARM_UP:
            r2 = float(self._r2(np.array([row]))[0])
            return variance * (1 - r2), 0.0
        return variance, 1.0

    def summary(self) -> dict:
        """For cost.json: what the control did."""
        steps = int(self.controlled_steps.sum())
        return {**self._summary(self.bank.t, self.fit, self.plain), "controlled_steps": steps}
