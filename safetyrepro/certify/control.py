"""Which cheap configuration helps which costly one, and the paths that feed their control-variate e-processes
(`--control auto`, population target; the statistics and why they are built so: analysis/control_variate.py).

Pairing. A free-form configuration (costly: it generates text) is paired with the log-probability configuration
of the same benchmark, template and shots (its cheap twin, scored on the same prompt by log-likelihoods, about a
tenth of the cost), when the run certifies both and neither skips items (`--selection records`). CrowS-Pairs has
no free-form configurations.

A path per (costly configuration, pair of models). Both configurations draw the benchmark's one item order
(o_0, o_1, ...). Step j of the path takes the costly configuration's next item o_i from the front (both models'
scores on it, and the cheap configuration's), and, when the path's own past asks for partners
(ControlledBettingCS.wants_partners), the next K_PARTNERS items from the back of the order, o_{N-1}, o_{N-2},
..., scored by the cheap configuration only. Front and back never meet: the front stops where the back's
partners begin, so a partner item is never a costly item of its path, and the costly configuration's own
evaluations (a prefix of the order, as without the control) reach the back only when the path is spent. Which
items a step uses is fixed by the path's past, so the path is one sequence in a fixed order whatever the rounds
did, and it reads only what is already scored: a step waits for its items, it never decides otherwise because
they are missing. Paths whose r^2 stays under MIN_R2 after GIVE_UP steps take plain steps for good and stop
asking for the cheap scores.

The cheap configuration's items on the front are its own prefix (it needs them for its own claims too); the
back's partners are extra items of it, evaluated when a planned costly step asks for them (`needs`) and kept
in `extra` (they are in the run's items.parquet, and its own stream takes them free when it gets there).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from safetyrepro.analysis.control_variate import K_PARTNERS, MIN_R2, WARM_UP, ControlledBettingCS
from safetyrepro.errors import UserError
from safetyrepro.tasks.envelope import Config

from .evidence import PairedEvidence, Reading, closeness, population_candidates

CONTROLS = ("auto", "none")
GIVE_UP = 30  # steps after which a path whose r^2 is under MIN_R2 is plain for good (no more cheap scores asked)


def cheap_twin(config_id: str, config_ids: Sequence[str]) -> str | None:
    """The log-probability configuration of the same benchmark, template and shots, if the run has it (none for
    an id that is not benchmark/template/decoding/<k>shot/scoring)."""
    try:
        cfg = Config.from_id(config_id)
    except UserError:
        return None
    if cfg.scoring != "free_form":
        return None
    twin = dataclasses.replace(cfg, decoding="greedy", scoring="logprob").config_id
    return twin if twin in config_ids else None


def pairings(
    benchmark: str, config_ids: Sequence[str], excluded: Mapping[str, frozenset[str]] | None = None
) -> dict[str, str]:
    """costly configuration -> its cheap twin, for the configurations the control can help."""
    if closeness(benchmark) is not None:
        return {}
    excluded = excluded or {}
    out = {}
    for cid in config_ids:
        twin = cheap_twin(cid, config_ids)
        if twin is not None and not excluded.get(cid) and not excluded.get(twin):
            out[cid] = twin
    return out


class Control:
    """The control-variate paths of one benchmark: a ControlledBettingCS row per (costly configuration, pair)."""

    def __init__(
        self,
        benchmark: str,
        twins: Mapping[str, str],
        order: np.ndarray,
        pairs: Sequence[tuple[str, str]],
        alpha_side: float,
        delta: float,
    ):
        self.benchmark, self.twins, self.order = benchmark, dict(twins), order
        self.pairs = list(pairs)
        self.N = len(order)
        self.delta = float(delta)
        self.row = {
            (cid, slot): k * len(pairs) + slot for k, cid in enumerate(self.twins) for slot in range(len(pairs))
        }
        n = len(self.row)
        self.bank = ControlledBettingCS(n, alpha_side, extra=population_candidates(delta), delta=delta)
        self.pos = np.zeros(n, dtype=np.int64)  # the next costly item, from the front
        self.used = np.zeros(n, dtype=np.int64)  # partner steps taken (each K_PARTNERS items from the back)
        self.d_sum = np.zeros(n)  # sum of the costly differences used (the reported estimate)
        self.plain = np.zeros(n, dtype=bool)  # given up: plain steps for good
        self.want = np.zeros(n, dtype=bool)  # the next step takes partners (decided from the row's past)
        self.items = [str(i) for i in order]
        self._p_cache: tuple[int, np.ndarray] | None = None
        self.extra: dict[tuple[str, str], list[str]] = {}  # (model, cheap configuration) -> partner items evaluated

    def controls(self, config_id: str) -> bool:
        return config_id in self.twins

    def limit(self, config_id: str, slot: int) -> int:
        """How far the path's front may go: where the back's partners begin."""
        return self.N - K_PARTNERS * int(self.used[self.row[(config_id, slot)]])

    def _decide(self, rows: np.ndarray) -> None:
        """Each row's choice for its next step (partners or not), from its own past: kept until it steps."""
        fresh = self.N - K_PARTNERS * self.used[rows] - self.pos[rows]
        self.want[rows] = self.bank.wants_partners(rows, fresh) & ~self.plain[rows]

    def _partners(self, row: int, steps: int = 1) -> list[str]:
        """The back's next `steps` x K_PARTNERS items for this row, in the order they are taken."""
        end = self.N - K_PARTNERS * int(self.used[row])
        return list(self.items[max(end - K_PARTNERS * steps, 0) : end][::-1])

    def catch_up(self, cache: Mapping[tuple[str, str, str], Mapping[str, float]]) -> None:
        """Take every step whose items are scored, all rows together, until none is ready."""
        empty: dict[str, float] = {}
        stores = {}
        for (cid, slot), row in self.row.items():
            a, b = self.pairs[slot]
            twin = self.twins[cid]
            stores[row] = tuple(cache.get((self.benchmark, x, m), empty) for x in (cid, twin) for m in (a, b))
        rows = np.array(sorted(self.row.values()), dtype=np.int64)
        while len(rows):
            ready, d, c, partners = [], [], [], []
            for row in rows.tolist():
                pos = int(self.pos[row])
                if pos >= self.N - K_PARTNERS * int(self.used[row]):
                    continue
                item = self.items[pos]
                da, db, ca, cb = stores[row]
                if item not in da or item not in db:
                    continue
                plain = bool(self.plain[row])
                if not plain and (item not in ca or item not in cb):
                    continue
                p = np.full(K_PARTNERS, np.nan)
                if self.want[row]:
                    mates = self._partners(row)
                    if any(i not in ca or i not in cb for i in mates):
                        continue
                    p = np.array([ca[i] - cb[i] for i in mates])
                ready.append(row)
                d.append(da[item] - db[item])
                c.append(0.0 if plain else ca[item] - cb[item])
                partners.append(p)
            if not ready:
                return
            r = np.array(ready, dtype=np.int64)
            self.bank.update(r, np.array(d), np.array(c), np.array(partners))
            self.d_sum[r] += np.array(d)
            self.used[r] += self.want[r]
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
        end = self.N - K_PARTNERS * int(self.used[row])
        upto = min(upto, end)
        partners: list[str] = []
        steps = max(upto - int(self.pos[row]), 0)
        t = int(self.bank.t[row])
        soon = t < WARM_UP <= t + steps and float(self.bank.r2(np.array([row]))[0]) >= MIN_R2  # its warm-up ends
        if steps and (soon or bool(self.want[row])):
            partners = self._partners(row, min(steps, max((end - upto) // K_PARTNERS, 0)))
        models = self.pairs[slot]
        return [(m, twin, upto) for m in models], [(m, twin, partners) for m in models if partners]

    def record_extra(self, model: str, config_id: str, items: Sequence[str]) -> None:
        self.extra.setdefault((model, config_id), []).extend(items)

    # what the claims and the planner read
    def p_values(self, config_id: str, evidence: PairedEvidence) -> np.ndarray:
        """(pairs, 4) anytime p-values of NOT_A, NOT_B, HI, LO (analysis/closed_testing.py): the control's rows
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
        rows = np.array([self.row[(config_id, slot)] for slot in range(len(self.pairs))])
        lo, hi = self.bank.bounds(evidence.alpha_side)
        steps = self.bank.t[rows]
        estimate = np.where(steps > 0, self.d_sum[rows] / np.maximum(steps, 1), 0.0)
        return Reading(lo[rows], hi[rows], estimate, np.zeros(len(rows), dtype=bool))

    def price(self, config_id: str, slot: int, variance: float) -> tuple[float, float]:
        """(the variance a costly step's difference has after the control, cheap items the path asks for per
        costly item: the cheap score on it unless the path is plain, and its partners while it takes them)."""
        row = self.row[(config_id, slot)]
        if self.plain[row]:
            return variance, 0.0
        if bool(self.want[row]):
            r2 = float(self.bank.r2(np.array([row]))[0])
            return variance * (1 - r2 * K_PARTNERS / (K_PARTNERS + 1)), 1.0 + K_PARTNERS
        return variance, 1.0

    def summary(self) -> dict:
        """For cost.json: what the control did."""
        rows = np.array(sorted(self.row.values()), dtype=np.int64)
        return {
            "pairs": {cid: twin for cid, twin in self.twins.items()},
            "costly_steps": int(self.bank.t[rows].sum()) if len(rows) else 0,
            "partner_steps": int(self.bank.partner_steps[rows].sum()) if len(rows) else 0,
            "partner_items_evaluated": sum(len(v) for v in self.extra.values()),
        }
