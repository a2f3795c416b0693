"""How many items certify's sequences need before they decide (issue 56: `plan --certify`).

The population target's claims come from betting e-processes on the paired item differences (IidBettingCS), read
by a closed test whose first step is alpha / (2 family): a lead is claimed once the e-process against "theta <= 0"
reaches 2 family / alpha, and "within +-margin" once both the one against "theta >= margin" and the one against
"theta <= -margin" have. Here the very sequences run on simulated paired 0/1 answers (discordance D: the share of
items the two models answer differently; effect E: the difference in accuracy, so an item favours A with
probability (D + E) / 2 and B with (D - E) / 2), many runs at once, and the items at which each run decides are
read off. A run that has not decided by `max_items` counts as never deciding.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

from .closed_testing import NOT_A, NOT_B
from .confidence_sequence import IidBettingCS, kelly_stake
from .control_variate import MAX_PARTNERS, ControlledBettingCS, growth_ceiling
from .evidence import PairedEvidence

NEVER = np.inf


@dataclass(frozen=True)
class ItemsToDecide:
    """Per simulated run, the items at which it decided (inf: not within max_items)."""

    items: np.ndarray
    max_items: int

    def quantile(self, q: float) -> float:
        """The items by which a share q of the runs decided (inf if fewer did within max_items)."""
        return float(np.quantile(self.items, q, method="higher"))

    def share_within(self, n: int) -> float:
        return float(np.mean(self.items <= n))


def seed_step(discordance: float, effect: float) -> np.ndarray:
    """One seed's paired difference's chances of -1, 0 and 1: (D - E) / 2, 1 - D, (D + E) / 2."""
    return np.array([(discordance - effect) / 2, 1 - discordance, (discordance + effect) / 2])


def seed_mean_law(discordance: float, effect: float, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """The paired item difference's values and chances when each model's item score is the mean of `seeds` 0/1
    answers (each seed's difference -1, 0 or 1 with chances (D - E) / 2, 1 - D, (D + E) / 2, seeds independent)."""
    step = seed_step(discordance, effect)
    probs = np.array([1.0])
    for _ in range(seeds):  # the sum's law over -seeds..seeds, one seed at a time
        probs = np.convolve(probs, step)
    return np.arange(-seeds, seeds + 1) / seeds, probs


def z_items_needed(discordance: float, effect: float, seeds: int, family: int, alpha: float, power: float) -> int:
    """The fixed-n paired z-test's items for `power` against a lead of `effect` on `seeds`-seed means, Bonferroni
    over `family` configurations (Holm's first step), with the lead's own spread:
    n = ((z_{1 - alpha / 2K} + z_power) sd / effect)^2."""
    from scipy.stats import norm

    values, probs = seed_mean_law(discordance, effect, seeds)
    sd = float(np.sqrt(probs @ values**2 - (probs @ values) ** 2))
    return int(np.ceil(((norm.ppf(1 - alpha / (2 * family)) + norm.ppf(power)) * sd / effect) ** 2))


def kelly_items(
    discordance: float,
    effect: float,
    *,
    family: int,
    alpha: float = 0.05,
    seeds: int = 1,
    runs: int = 400,
    max_items: int = 2000,
    seed: int = 0,
) -> ItemsToDecide:
    """Items to the same claim of a lead for the bettor that knows the law and bets its growth-optimal constant
    stake (Kelly): no betting e-process claims sooner on average, so it bounds what any anytime-valid sequence
    can do on these answers."""
    values, probs = seed_mean_law(discordance, abs(effect), seeds)
    stake, _ = kelly_stake(values, probs)
    rng = np.random.default_rng(seed)
    capital = np.log1p(stake * rng.choice(values, size=(runs, max_items), p=probs)).cumsum(axis=1)
    hit = capital >= np.log(2 * family / alpha)
    return ItemsToDecide(np.where(hit.any(axis=1), hit.argmax(axis=1) + 1.0, NEVER), max_items)


def _seed_differences(rng: np.random.Generator, runs: int, seeds: int, p_a: float, p_b: float) -> np.ndarray:
    """(runs, seeds) paired differences of 0/1 answers: 1 with chance p_a, -1 with p_b, else 0."""
    u = rng.random((runs, seeds))
    return np.where(u < p_a, 1.0, np.where(u < p_a + p_b, -1.0, 0.0))


def _first_crossing(log_e: np.ndarray, threshold: float, found: np.ndarray, t: int) -> None:
    newly = (found == NEVER) & (log_e >= threshold)
    found[newly] = t


def items_to_decide(
    discordance: float,
    effect: float,
    *,
    family: int,
    alpha: float = 0.05,
    margin: float | None = None,
    runs: int = 400,
    max_items: int = 2000,
    seed: int = 0,
    seeds: int = 1,
    stakes: str = "growth",
) -> ItemsToDecide:
    """Items to a decision of certify's population sequences, over `runs` simulated runs: to the claim of a lead
    of `effect` (margin None), or to the claim "within +-margin" (both sides). `seeds`: each model's item score is
    the mean of that many 0/1 answers, a seed's answers as the item's (discordance and effect per seed, the seeds
    independent given the item), so the differences vary less, as a sampled configuration's five-seed means do.
    `stakes`: the sequences' (confidence_sequence.STAKES; "width" is the stake before issue 56)."""
    if not 0 < discordance <= 1 or not abs(effect) <= discordance:
        raise ValueError(f"discordance {discordance} in (0, 1] and |effect| {effect} at most it")
    if margin is not None and not 0 < margin < 1:
        raise ValueError(f"margin {margin} must be in (0, 1)")
    alpha_side = alpha / family / 2  # certify's bank: alpha_each / 2
    threshold = float(np.log(2 * family / alpha))  # the closed test's first step, alpha / (2 family)
    extra = (0.0,) if margin is None else (0.0, margin, -margin)
    cs = IidBettingCS(runs, alpha_side, -1.0, 1.0, extra=extra, stakes=stakes)
    rng = np.random.default_rng(seed)
    p_b, _, p_a = seed_step(discordance, effect)
    streams = np.arange(runs)
    first = np.full(runs, NEVER)
    second = np.full(runs, NEVER)
    for t in range(1, max_items + 1):
        d = _seed_differences(rng, runs, seeds, p_a, p_b).mean(axis=1)
        cs.update(streams, d)
        if margin is None:
            _first_crossing(cs.log_e_above(0.0) if effect >= 0 else cs.log_e_below(0.0), threshold, first, t)
            if (first < NEVER).all():
                break
        else:
            _first_crossing(cs.log_e_below(margin), threshold, first, t)
            _first_crossing(cs.log_e_above(-margin), threshold, second, t)
            if (first < NEVER).all() and (second < NEVER).all():
                break
    return ItemsToDecide(first if margin is None else np.maximum(first, second), max_items)


def twin_copy(twin_r: float, seeds: int) -> float:
    """The chance q that a seed's paired difference is the twin's (else a fresh draw from the same law) that gives
    the item score's difference, the mean of `seeds` of them, correlation `twin_r` with the twin's: r^2 (1 / S +
    (1 - 1 / S) q^2) = q^2 (copies of one twin tie the seeds together)."""
    if not 0 <= twin_r < 1:
        raise ValueError(f"twin correlation {twin_r} must be in [0, 1)")
    return float(twin_r / np.sqrt(seeds - twin_r**2 * (seeds - 1)))


def twin_law(discordance: float, effect: float, seeds: int, twin_r: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The joint law of (D, C) on finitely many points (d, c, chance): C the log-probability twin's paired
    difference (-1, 0 or 1, the same law as one seed's), D the mean of `seeds` seed differences, each C with
    chance twin_copy(twin_r, seeds), else a fresh draw (sequential/control_variate.py growth_ceiling reads it)."""
    q = twin_copy(twin_r, seeds)
    step = seed_step(discordance, effect)
    d, c, w = [], [], []
    for ci, pc in zip((-1, 0, 1), step, strict=True):
        for copies in range(seeds + 1):
            fresh = np.array([1.0])
            for _ in range(seeds - copies):  # the fresh seeds' sum over -(S - m)..S - m
                fresh = np.convolve(fresh, step)
            total = copies * ci + np.arange(-(seeds - copies), seeds - copies + 1)
            d += list(total / seeds)
            c += [ci] * len(total)
            w += list(pc * comb(seeds, copies) * q**copies * (1 - q) ** (seeds - copies) * fresh)
    return np.array(d), np.array(c, dtype=float), np.array(w)


def controlled_items_to_decide(
    discordance: float,
    effect: float,
    twin_r: float,
    *,
    family: int,
    alpha: float = 0.05,
    seeds: int = 1,
    runs: int = 400,
    max_items: int = 2000,
    seed: int = 0,
) -> tuple[ItemsToDecide, ItemsToDecide]:
    """Free-form items to the claim of a lead of `effect`, (without the twin, with it: `certify --control auto`), on
    the same simulated answers: the log-probability twin correlated `twin_r` with the item score's difference
    (twin_law: with seeds > 1 they copy one twin answer, so their mean varies more than independent seeds') and
    scored on a pool beyond the subset large enough for every partner asked for. Both are ControlledBettingCS
    (sequential/control_variate.py), whose plain steps are the plain sequence's: without the twin no partner is
    ever asked for."""
    if not 0 < effect <= discordance <= 1:
        raise ValueError(f"discordance {discordance} in (0, 1] and effect {effect} in (0, discordance]")
    q = twin_copy(twin_r, seeds)
    banks = [ControlledBettingCS(runs, alpha / family / 2, beyond=max_items * MAX_PARTNERS) for _ in range(2)]
    threshold = float(np.log(2 * family / alpha))
    # the free-form answers from items_to_decide's draws (with one seed, the very differences its runs see), the
    # twin's and the partners' from a second stream
    rng, twin_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
    p_b, _, p_a = seed_step(discordance, effect)
    streams = np.arange(runs)
    found = [np.full(runs, NEVER), np.full(runs, NEVER)]
    plenty = np.full(runs, 10**9)
    for t in range(1, max_items + 1):
        fresh = _seed_differences(rng, runs, seeds, p_a, p_b)
        other = _seed_differences(twin_rng, runs, 1, p_a, p_b)[:, 0]
        if seeds == 1:  # the law of (D, C) is symmetric: C is D with chance q, else a fresh draw
            d = fresh[:, 0]
            c = np.where(twin_rng.random(runs) < q, d, other)
        else:  # each seed is the twin's difference with chance q, else a fresh draw
            c = other
            d = np.where(twin_rng.random((runs, seeds)) < q, c[:, None], fresh).mean(axis=1)
        partners = _seed_differences(twin_rng, runs, MAX_PARTNERS, p_a, p_b)
        for bank, first, twin in zip(banks, found, (False, True), strict=True):
            live = streams[first == NEVER]
            k = bank.partners_wanted(live, plenty[live], plenty[live]) if twin else np.zeros(len(live), dtype=int)
            asked = np.where(np.arange(bank.k)[None, :] < k[:, None], partners[live, : bank.k], np.nan)
            bank.update(live, d[live], c[live], asked)
            _first_crossing(bank.log_e_above(0.0), threshold, first, t)
        if all((first < NEVER).all() for first in found):
            break
    plain, controlled = (ItemsToDecide(first, max_items) for first in found)
    return plain, controlled


def twin_share(plain: ItemsToDecide, helped: ItemsToDecide) -> tuple[float | None, int]:
    """(the items with the twin over without, summed over the runs that claim both ways; how many runs those are)."""
    both = np.isfinite(plain.items) & np.isfinite(helped.items)
    share = float(helped.items[both].sum() / plain.items[both].sum()) if both.any() else None
    return share, int(both.sum())


def least_twin_share(discordance: float, effect: float, seeds: int, twin_r: float) -> float:
    """The least share of the items any control variate could leave (growth_ceiling of twin_law: the twin's law
    known exactly), where claims need many items."""
    rate, best = growth_ceiling(*twin_law(discordance, effect, seeds, twin_r))
    return rate / best if best > 0 else 1.0


def paired_cells(share_a: float, share_b: float, agreement: float) -> np.ndarray:
    """The chances of the four paired answers (1, 1), (1, 0), (0, 1), (0, 0) of two models whose answers are 1 on
    shares share_a and share_b of items and alike on a share `agreement` of them."""
    both = (agreement - 1 + share_a + share_b) / 2
    cells = np.array([both, share_a - both, share_b - both, 1 - share_a - share_b + both])
    if not all(0 < x < 1 for x in (share_a, share_b, agreement)) or (cells < -1e-12).any():
        low = abs(share_a - share_b)
        high = 1 - abs(share_a + share_b - 1)
        raise ValueError(
            f"shares {share_a:g} and {share_b:g} in (0, 1) agree on between {low:.3g} and {high:.3g} of items, "
            f"not {agreement:g}"
        )
    return np.clip(cells, 0.0, None)


def draw_paired(rng: np.random.Generator, cells: np.ndarray, size) -> tuple[np.ndarray, np.ndarray]:
    """Two models' 0/1 answers drawn from paired_cells' four chances, `size` pairs."""
    k = np.searchsorted(np.cumsum(cells), rng.random(size) * cells.sum(), side="right")
    return (k <= 1).astype(float), ((k == 0) | (k == 2)).astype(float)


def closeness_items_to_decide(
    share_a: float,
    share_b: float,
    agreement: float,
    *,
    ideal: float = 0.5,
    family: int,
    alpha: float = 0.05,
    runs: int = 400,
    max_items: int = 2000,
    seed: int = 0,
) -> ItemsToDecide:
    """Items to the claim of the model nearer `ideal` (CrowS-Pairs: 0.5), over `runs` simulated runs of certify's
    paired sign test (sequential/evidence.py PairedEvidence, the population target): each model answers 1 (the
    stereotyped sentence) on a share of items, the two alike on `agreement` of them."""
    theta = round(abs(share_b - ideal) - abs(share_a - ideal), 12)  # > 0: a nearer (0.55, 0.45: exactly 0)
    if theta == 0:
        raise ValueError(f"shares {share_a:g} and {share_b:g} are equally near {ideal:g}: no lead to claim")
    cells = paired_cells(share_a, share_b, agreement)
    ev = PairedEvidence(ideal, runs, max_items, "population", alpha / family / 2, 0.05, None)
    threshold = float(np.log(2 * family / alpha))
    rng = np.random.default_rng(seed)
    streams = np.arange(runs)
    first = np.full(runs, NEVER)
    side = NOT_A if theta > 0 else NOT_B  # the null the lead rejects
    for t in range(1, max_items + 1):
        ev.update(streams, *draw_paired(rng, cells, runs))
        _first_crossing(ev.sign_log_e()[:, side], threshold, first, t)
        if (first < NEVER).all():
            break
    return ItemsToDecide(first, max_items)
