"""Anytime-valid e-processes for a costly configuration's paired difference, helped by a cheaper configuration
scored on the same items (a control variate, issue 45), for the population target.

Setting. Items are i.i.d. draws from the benchmark. On item i, D_i is the costly configuration's paired
difference (model a minus model b, in [-1, 1]; free-form, seconds to minutes an item) and C_i the cheap
configuration's on the same item (log-probabilities, about a tenth of the cost). theta = E[D] is what is
certified; C only helps.

Why partner items, not a bound on E[C]. The textbook control variate, D_i - beta (C_i - mu_C), needs mu_C. A
confidence sequence for mu_C from the cheap stream and a union over it (alpha split in two) adds its width to
the costly one's *linearly* (beta times the cheap sequence's width), which at 300 items leaves almost nothing
of the gain. Instead each step takes the costly item and k *partner* items that only the cheap configuration
scores, fresh items the costly stream never uses, and observes

    y = D - gamma * g,   g = (1/k) sum_q clip(C - C'_q, -1, 1)

with C the cheap difference on the costly item and C'_q on partner q. (C, C'_q) are two i.i.d. draws, so any
antisymmetric function of them has mean zero: E[g | past] = 0 exactly and E[y | past] = theta whatever gamma
is, provided gamma is predictable (computed from earlier steps only). No nuisance, no alpha split: y is an
ordinary bounded observation with mean theta, in [-1 - |gamma|, 1 + |gamma|], and the with-replacement betting
e-process of IidBettingCS runs on it, a partner step's stakes set by the growth-rate plug-in (aGRAPA, as the
subset target's controlled steps) and truncated to that range (each factor stays >= 1 - c). With
gamma at its best value the variance of y is Var(D) (1 - r^2 k / (k + 1)) for r the correlation of D and C
(the linear case); clipping the differences at 1 halves the range the stakes must respect at a small cost in
correlation.

What bounds the gain (measured in perf/certify_control.py, docs/certify.md). A betting e-process for a
bounded mean grows at most at rate max_lambda E log(1 + lambda (y - m)) (the KL-inf rate), with lambda
limited by y's range: the control cuts the variance but widens the range, so where the plain process already
bets at its cap (large differences, few items) the control buys little; it buys most where the difference is
small against the spread (many items). At r = 0.8 and two 0/1 models the growth-optimal ceiling, even with
the cheap configuration's law known exactly, is about 1.5x fewer costly items at a 0.35 difference, 1.8x at
0.25, 2.3x at 0.15.

Fallback. gamma is the least-squares slope of D on C from earlier steps times k / (k + 1), clipped to
[-1, 1]; partners are asked for only after WARM_UP steps and while the running r^2 of D and C is at least MIN_R2
(and beyond what chance gives: CHANCE_R2 / steps), so with no correlation the process takes plain steps
(gamma = 0, y = D): exactly the plain e-process, item for item (tested against IidBettingCS). Nor are they asked
for where a plain step is expected to grow faster (_partners_pay): where the plain stake is already at its cap,
the partners' smaller variance buys nothing and their wider range costs stake (five-seed means at a 0.35 lead
took 1.13 of the plain items with partners on every step, 1.03 with this rule; perf/certify_items_to_decision.md).

Where partners come from (issue 56). First from a pool beyond the costly subset that only the cheap configuration
scores: those items cost the costly stream nothing, so a step takes as many as the pool left spreads over the
steps the claim is expected to need, up to MAX_PARTNERS (PPI's use of the unlabelled pool). Then from the subset
itself, where each partner is an item the costly stream can no longer use: 2 a step, MIN_PARTNER_ITEMS in all
and no more than BACK_SHARE of the subset, and only where the steps are expected to fit. How many partners a
step takes is decided before the step, from the stream's own past: a predictable choice between valid bets,
never a choice after seeing which did better.

Vectorised over streams, as IidBettingCS: one call updates every stream that takes a step.
"""

from __future__ import annotations

import numpy as np

from .confidence_sequence import GROWTH_TRUNCATION, GridEProcesses, growth_stakes, kelly_stake

K_PARTNERS = 2  # partner items a step from the costly subset's back: the variance factor is 1 - r^2 k / (k + 1)
MAX_PARTNERS = 16  # ... from the pool beyond it: at r = 0.8, 1 - r^2 16/17 is 10 % over PPI's known-mean 1 - r^2
WARM_UP = 10  # plain steps before partners are first asked for (r and gamma need a few items)
MIN_R2 = 0.2  # partners only while the running r^2 of D and C is at least this
CHANCE_R2 = 6.0  # ... and at least this / steps: n r^2 is about chi-square(1) without correlation (P > 6: 1.4 %)
CLIP = 1.0  # g's pairwise differences are clipped at this: g in [-CLIP, CLIP]
MAX_GAMMA = 1.0
OPTIMISM = -0.5  # the capacity rule reads the difference half a standard error smaller (the planner: one larger)
MIN_PARTNER_ITEMS = 50  # partner items a stream takes at most from its costly subset (a claim that needs the whole
# subset loses at most these; measured: partners from a third of a 2,000-item subset cut two identical models'
# "within" claims from 22 to 10 on three grids)
BACK_SHARE = 0.025  # ... and at most this share of the subset: on 300-item grids (a 0.25 lead, r = 0.8) 50 back
# partner items lost 6 of a plain run's 466 claims for 6 % fewer costly evaluations, 20 lost 2, 7 (this share) none
FIT_MARGIN = 1.5  # the costly stream keeps 1.5 x its expected need (the need is optimistic)


def partners_per_step(beyond: int = 0) -> int:
    """The most partners a step takes: MAX_PARTNERS while items beyond the costly subset are left (`beyond`: the
    twin's pool outside it, which no costly step can use), else K_PARTNERS from the subset's own back, where each
    partner item is one the costly stream can no longer use and two a step buy the most per partner item."""
    return MAX_PARTNERS if beyond > 0 else K_PARTNERS


def control_term(c_item: np.ndarray, c_partners: np.ndarray) -> np.ndarray:
    """(streams,) cheap differences on the costly items and (streams, k) on their partners (NaN: no partner there)
    -> g per stream: the mean of the clipped pairwise differences, an antisymmetric function of i.i.d. pairs (mean
    zero); 0 where a stream has no partner."""
    c_item = np.asarray(c_item, dtype=float)
    c_partners = np.asarray(c_partners, dtype=float)
    pairs = np.clip(c_item[:, None] - c_partners, -CLIP, CLIP)
    k = (~np.isnan(pairs)).sum(axis=1)
    return np.where(k > 0, np.nansum(pairs, axis=1) / np.maximum(k, 1), 0.0)


class ControlledBettingCS(GridEProcesses):
    """n_streams one-sided betting e-processes and confidence sequences for theta = E[D], D in [-1, 1],
    observed as y = D - gamma g (module docstring). Same candidates, stakes and reading as IidBettingCS
    (sequential/confidence_sequence.py), in the caller's units; the truncation of each stake follows that
    step's range [-1 - |gamma| CLIP, 1 + |gamma| CLIP]."""

    def __init__(
        self,
        n_streams: int,
        alpha: float,
        grid_points: int = 201,
        extra: tuple[float, ...] = (),
        delta: float = 0.0,
        beyond: int = 0,
        subset: int | None = None,
    ):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha {alpha} must be in (0, 1)")
        if beyond < 0:
            raise ValueError(f"items beyond the subset: {beyond}")
        self.alpha, self.delta = float(alpha), float(delta)
        self.k = partners_per_step(beyond)  # the most partners a step takes
        # partner items a stream may take from the costly subset's back (`subset`: its size, where known)
        self.back_cap = MIN_PARTNER_ITEMS if subset is None else min(MIN_PARTNER_ITEMS, int(BACK_SHARE * subset))
        self._grid_range = (-1.0, 1.0)
        self.grid = np.unique(np.round(np.concatenate([np.linspace(-1.0, 1.0, grid_points), extra]), 12))
        g = len(self.grid)
        self.log_plus = np.zeros((n_streams, g))
        self.log_minus = np.zeros((n_streams, g))
        self.max_plus = np.zeros((n_streams, g))
        self.max_minus = np.zeros((n_streams, g))
        self.t = np.zeros(n_streams, dtype=np.int64)  # steps taken
        self.y_sum = np.zeros(n_streams)  # the plug-in mean's numerator (a prior point at 0)
        self.var_sum = np.ones(n_streams)  # 1 + sum of (y_i - mu_hat_i)^2 (IidBettingCS's 1/4 on its [0, 1] scale)
        # the predictable fit: every step's (D, C)
        self.fit_dc = np.zeros((n_streams, 5))  # sum d, c, d^2, c^2, dc
        self.partner_steps = np.zeros(n_streams, dtype=np.int64)
        self.partner_items_back = np.zeros(n_streams, dtype=np.int64)  # taken from the costly subset's back
        self._log_inv_alpha = np.log(1.0 / self.alpha)

    # the predictable choices
    def r2(self, streams=None) -> np.ndarray:
        """Per stream, the running squared correlation of D and C over its steps so far."""
        s = slice(None) if streams is None else np.asarray(streams, dtype=np.int64)
        return r_squared(self.fit_dc[s], np.maximum(self.t[s], 1))

    def partners_wanted(self, streams, fresh_left, beyond_left=0, cost_ratio=None) -> np.ndarray:
        """How many partners each stream's next step takes (0: a plain step), decided from its own past only,
        after WARM_UP steps and while r^2 >= MIN_R2 and beyond chance.

        From the pool beyond the costly subset (`beyond_left` items left to the stream): spread over the steps the
        claim is expected to need, up to self.k a step, at least one. Those items cost the costly stream nothing,
        so an optimistic spread loses no claim: where the claim takes longer, its last steps are plain. So spread,
        the partners give PPI's variance, Var(D - gamma C) + gamma^2 Var(C) / k a step. With `cost_ratio` (per
        stream: a cheap item's cost over a costly step's, NaN where unknown) no more than the k, from 0, that
        leaves the least model time to the claim, (1 + rho (1 + k)) x the steps still needed with k partners:
        fewer partners, more costly steps, less time where cheap items are not so cheap.

        From the subset's own back (`fresh_left`: the items the stream may still use, a step with k partners uses
        1 + k of them): the k (at most K_PARTNERS, self.back_cap in all) that leaves the costly stream the
        fewest items to its claim among those whose steps fit with FIT_MARGIN to spare; where none fits, plain
        steps use the items better."""
        s = np.asarray(streams, dtype=np.int64)
        fresh_left = np.asarray(fresh_left, dtype=float)
        beyond_left = np.broadcast_to(np.asarray(beyond_left, dtype=np.int64), s.shape)
        n = np.maximum(self.t[s], 1)
        r2 = self.r2(s)
        mean = self.fit_dc[s, 0] / n
        var_d = np.maximum(self.fit_dc[s, 2] / n - mean**2, 0.01)

        def need(k: int, span=1.0) -> np.ndarray:
            return _items_to_decide(mean, var_d * (1 - r2 * k / (k + 1)), n, self._log_inv_alpha, self.delta, span)

        def paced(k: int) -> np.ndarray:
            # the stakes respect y's range, 1 + |gamma| a side: where claims need few items that, not the
            # variance, sets their pace, so the time a partner buys is priced with it
            return need(k, 1.0 + np.abs(self.gamma(s, np.full(len(s), k)))) if k else need(0)

        spread = np.clip(beyond_left // np.maximum(need(self.k), 1.0).astype(np.int64), 1, self.k)
        spread = np.minimum(spread, beyond_left)
        if cost_ratio is not None:
            spread = np.minimum(spread, self._cheapest_k(np.asarray(cost_ratio, dtype=float), paced))
        room = np.minimum(fresh_left - 1, self.back_cap - self.partner_items_back[s])
        back = np.zeros(len(s), dtype=np.int64)
        for k in range(1, K_PARTNERS + 1):
            fits = (FIT_MARGIN * need(k) * (1 + k) <= fresh_left) & (k <= room)
            back = np.where(fits, k, back)  # a larger k fits only where a smaller one does: the last that fits
        chosen = np.where(beyond_left > 0, spread, back)
        correlated = r2 >= np.maximum(MIN_R2, CHANCE_R2 / n)
        pays = _partners_pay(mean, var_d, r2, n, chosen, np.abs(self.gamma(s, np.maximum(chosen, 1))))
        return np.where((self.t[s] >= WARM_UP) & correlated & pays, chosen, 0)

    def _cheapest_k(self, rho: np.ndarray, need) -> np.ndarray:
        """Per stream, the partners a step (0 to self.k) with the least expected model time to the claim (`need`:
        k -> the steps still needed), a costly step costing 1 and a cheap item rho (self.k where rho is unknown)."""
        time = np.stack([(1 + rho * (1 + k)) * need(k) for k in range(self.k + 1)])
        return np.where(np.isfinite(rho), time.argmin(axis=0), self.k)

    def gamma(self, streams, k) -> np.ndarray:
        """The coefficient a step of each stream with k partners would use now (from earlier steps only): the
        least-squares slope of D on C times k / (k + 1), g's variance being C's times (k + 1) / k."""
        s = np.asarray(streams, dtype=np.int64)
        k = np.asarray(k, dtype=float)
        fitted = slope(self.fit_dc[s], np.maximum(self.t[s], 1)) * k / (k + 1)
        return np.clip(fitted, -MAX_GAMMA, MAX_GAMMA)

    def update(self, streams, d, c, partners=None, from_back=None) -> None:
        """One step for each of `streams` (distinct): the costly difference d, the cheap one c on the same item,
        and partners (streams, self.k) of the cheap one on partner items, NaN rows where a stream takes a
        plain step (a row takes its first k columns, NaN after them). The caller takes exactly the partners
        partners_wanted() asked for before the step; `from_back`: per stream, how many of them came from the costly
        subset's back (default: all, when no pool beyond it is given)."""
        s = np.asarray(streams, dtype=np.int64)
        if len(s) == 0:
            return
        d = np.asarray(d, dtype=float)
        c = np.asarray(c, dtype=float)
        if partners is None:
            partners = np.full((len(s), self.k), np.nan)
        partners = np.asarray(partners, dtype=float).reshape(len(s), -1)
        k = (~np.isnan(partners)).sum(axis=1)
        with_partners = k > 0
        if np.any(with_partners & (self.t[s] < WARM_UP)):
            raise ValueError("a stream took partners before its warm-up ended")
        g = np.where(with_partners, control_term(c, partners), 0.0)
        gamma = np.where(with_partners, self.gamma(s, np.maximum(k, 1)), 0.0)
        y = d - gamma * g
        span = np.abs(gamma) * CLIP
        t = self.t[s] + 1
        mu_hat = self.y_sum[s] / t
        sigma2 = self.var_sum[s] / t
        m = self.grid[None, :]
        # every step's stakes: the growth-rate plug-in, IidBettingCS's; a partner step's truncation follows its
        # wider range
        lam_plus, lam_minus = growth_stakes(mu_hat, sigma2, m)
        with np.errstate(divide="ignore"):
            cap_plus = np.where(m + 1 + span[:, None] > 0, GROWTH_TRUNCATION / (m + 1 + span[:, None]), np.inf)
            cap_minus = np.where(1 + span[:, None] - m > 0, GROWTH_TRUNCATION / (1 + span[:, None] - m), np.inf)
        gap = y[:, None] - m
        plus = self.log_plus[s] + np.log1p(np.minimum(lam_plus, cap_plus) * gap)
        minus = self.log_minus[s] + np.log1p(-np.minimum(lam_minus, cap_minus) * gap)
        self.log_plus[s], self.log_minus[s] = plus, minus
        self.max_plus[s] = np.maximum(self.max_plus[s], plus)
        self.max_minus[s] = np.maximum(self.max_minus[s], minus)
        self.var_sum[s] += (y - mu_hat) ** 2
        self.y_sum[s] += y
        self.t[s] = t
        self.fit_dc[s] += np.stack([d, c, d * d, c * c, d * c], axis=1)
        self.partner_steps[s] += with_partners
        self.partner_items_back[s] += k if from_back is None else np.asarray(from_back, dtype=np.int64)

    def variance(self) -> np.ndarray:
        """Per stream, the plug-in variance of y so far (the planner's spread)."""
        return self.var_sum / np.maximum(self.t, 1)


def _partners_pay(mean, var_d, r2, n, k, gamma) -> np.ndarray:
    """Per stream, whether a step with k partners is expected to grow the e-process against "no lead" faster than a
    plain step: each stake the Kelly one for its variance (1 - r^2 k / (k + 1) of the plain one's with partners)
    truncated to its range (1 + |gamma| CLIP a side with partners), the growth lam theta - lam^2 (V + theta^2) / 2,
    at a lead one standard error smaller than the running mean (a pessimistic lead favours the partners, which
    pay where the lead is small). Where the plain stake is already at its cap (a lead large against the spread:
    five-seed means at a 0.35 lead) the partners' smaller variance buys nothing and their range costs stake."""
    k = np.asarray(k, dtype=float)
    theta = np.clip(np.abs(mean) - np.sqrt(var_d / n), 1e-3, 1.0)
    helped = var_d * (1 - r2 * k / (k + 1))

    def growth(variance, cap):
        lam = np.minimum(growth_stakes(theta, variance, np.zeros(1))[0][:, 0], cap)  # the stake the e-process bets
        return lam * theta - lam**2 * (variance + theta**2) / 2

    return growth(helped, GROWTH_TRUNCATION / (1 + gamma * CLIP)) > growth(var_d, GROWTH_TRUNCATION)


def _items_to_decide(mean, variance, t, log_inv_alpha: float, delta: float, span=1.0) -> np.ndarray:
    """About how many more steps a stream needs before its claim (certify's planning heuristic, algorithm.py
    items_to_decide, here per stream): optimistic by one standard error while few items are in. `span`: the
    observation's range a side over a plain difference's (the range term's factor)."""
    se = np.sqrt(variance / t)
    d_win = np.clip(np.abs(mean) + OPTIMISM * se, 1e-3, 1.0)
    need = 2 * variance * log_inv_alpha / d_win**2 + span * log_inv_alpha / d_win
    inside = delta - (np.abs(mean) + se)
    with np.errstate(divide="ignore", invalid="ignore"):
        near = np.where(inside > 0, 2 * variance * log_inv_alpha / inside**2 + span * log_inv_alpha / inside, np.inf)
    return np.maximum(np.minimum(need, near) - t, 1.0)


def _moments(sums: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mx, my = sums[:, 0] / n, sums[:, 1] / n
    vx = np.maximum(sums[:, 2] / n - mx**2, 0.0)
    vy = np.maximum(sums[:, 3] / n - my**2, 0.0)
    return vx, vy, sums[:, 4] / n - mx * my


def slope(sums: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Least-squares slope of the first variable on the second (0 where the second does not vary)."""
    _, vy, cov = _moments(sums, n)
    return np.where(vy > 1e-9, cov / np.maximum(vy, 1e-9), 0.0)


def r_squared(sums: np.ndarray, n: np.ndarray) -> np.ndarray:
    vx, vy, cov = _moments(sums, n)
    ok = (vx > 1e-9) & (vy > 1e-9)
    return np.where(ok, cov**2 / np.maximum(vx * vy, 1e-18), 0.0)


def correlation(sums: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The signed correlation of the two variables (0 where either does not vary): r_squared's root, cov's sign."""
    _, _, cov = _moments(sums, n)
    return np.sign(cov) * np.sqrt(r_squared(sums, n))


def growth_ceiling(d, c, weights, theta0: float = 0.0) -> tuple[float, float]:
    """What any e-process against "E[D] <= theta0" can grow by per item, without and with the cheap score C on
    the same item, C's law known exactly (more than partners tell): (plain, with C).

    A law of (D, C) on finitely many points (d, c, weights). By duality, the e-values of the null {E[D] <= theta0,
    C's law given} are 1 + lambda (D - theta0) - (h(C) - E h(C)) for lambda >= 0 and any function h, nonnegative
    wherever D in [-1, 1] can fall: the growth-optimal one maximises E log of it (the KL-inf rate), a concave
    problem solved here. Its ratio to the plain rate (h = 0, the bounded-mean KL-inf) is the most a control
    variate can cut the expected items to a claim when both are many; perf/certify_control.py tabulates it."""
    from scipy.optimize import minimize

    d, c, w = (np.asarray(x, dtype=float) for x in (d, c, weights))
    w = w / w.sum()
    levels, inverse = np.unique(c, return_inverse=True)
    p_level = np.bincount(inverse, weights=w, minlength=len(levels))
    top = 1.0 / (1.0 + theta0)  # the plain stake's bound: 1 + lambda (-1 - theta0) >= 0

    def log_growth(lam, h):
        g = h[inverse] - p_level @ h
        return float(w @ np.log(np.maximum(1 + lam * (d - theta0) - g, 1e-300)))

    _, plain = kelly_stake(d - theta0, w, top)

    def objective(x):
        return -log_growth(x[0], x[1:])

    constraints = [  # at D = -1 each level's factor stays positive: 1 - lambda (1 + theta0) - (h_l - E h) > 0
        {"type": "ineq", "fun": lambda x, j=j: 1 - x[0] * (1 + theta0) - (x[1 + j] - p_level @ x[1:]) - 1e-9}
        for j in range(len(levels))
    ]
    start = np.zeros(1 + len(levels))
    start[0] = top / 2
    best = minimize(
        objective, start, constraints=constraints, bounds=[(0, top)] + [(-2, 2)] * len(levels), method="SLSQP"
    )
    return float(max(plain, 0.0)), float(max(-best.fun, plain, 0.0))
