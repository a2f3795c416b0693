"""What the control variate (`certify --control auto`, issue 45) buys, and what it could buy at best:

    python perf/certify_control.py                  # 10 synthetic grids per scenario, the ceiling, the records
    python perf/certify_control.py --grids 4 --skip-published --figure /tmp/control.png
    python perf/certify_control.py --grids 5 --only subset   # the subset target's table and figure only
    python perf/certify_control.py --grids 5 --only pools    # the population target on large pools only
    python perf/certify_control.py --grids 16 --only greedy  # those pools' greedy configurations alone
    python perf/certify_control.py --only stakes             # how much of the saving is the stake (streams)

0. The subset target (`--target subset`, certify/control.py SubsetControl): 300- to 2,000-item grids of
   TruthfulQA's T1 and T3 at 0 and 5 shots (12 free-form configurations, 4 twins), leads from 0.35 down to
   0.10, r = 0.8 and r = 0, cost-aware rounds: the free-form evaluations and model time with the control as a
   share of without (`share`). The population target with a pool beyond the subset (`--only pools`, issue 56):
   the same configurations on 2,000-item subsets whose twins score 18,000 more items, and 300 of 1,500.

1. Synthetic 300-item grids of TruthfulQA's 48 configurations, two models, built as a sweep builds them
   (tests/certify/certify_grids.py correlated_problem): every free-form answer is tied to the same item's
   log-probability answer with a probability set so that a free-form configuration's paired differences
   correlate with its log-probability twin's at r = 0.8 (greedy and sampled alike), or at r = 0. Per scenario,
   certify with `--control none` and `--control auto` on the same grids, cost-aware rounds as a live run makes
   them (an item of one model costs 0.1 with log-probabilities, 1 greedy free-form, 5 sampled: five seeds;
   perf/certify_allocation.py item_cost): the verdicts, the costly (free-form) model evaluations, the cheap ones
   and the model time, each summed over the grids, how many grids reached the same verdict both ways, and the
   claims made (pair x configuration claims decided, summed).
2. The ceiling (sequential/control_variate.py growth_ceiling): the growth rate of the best e-process against
   "theta <= 0" for one item's paired difference, without and with the cheap configuration's score on the same
   item, its whole law known (the KL-inf rate; no e-process on these observations grows faster, so none decides
   sooner on average): their ratio is the most any control variate can save, for 0/1 answers at accuracies
   p_a, p_b, greedy decoding, r = 0.8.
3. The published records: the 24-item study replayed both ways (study), the certified study's records
   re-read both ways (study/certified, --held-only: no model runs), and the twin correlation measured on
   both record sets, where both configurations of a pair hold the same items.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "certify"))
sys.path.insert(0, str(ROOT / "perf"))

from certify_grids import CostedOracle, correlated_problem, greedy_short, short, twin_correlation  # noqa: E402

from safetyrepro.certify.algorithm import CertifyOptions, certify  # noqa: E402
from safetyrepro.certify.outputs import by_scoring  # noqa: E402
from safetyrepro.grid.twins import pairings, twin_correlations  # noqa: E402
from safetyrepro.sequential.control_variate import growth_ceiling, partners_per_step, slope  # noqa: E402

SCENARIOS = {
    "far ahead (0.75 vs 0.40)": lambda cfg, m: 0.75 if m == "a" else 0.40,
    "ahead (0.70 vs 0.45)": lambda cfg, m: 0.70 if m == "a" else 0.45,
    "reverses with template": lambda cfg, m: (
        (0.75 if m == "a" else 0.4) if cfg.template in ("T1", "T2") else (0.4 if m == "a" else 0.75)
    ),
    "identical (0.55)": lambda cfg, m: 0.55,
}


CEILING_ACCURACIES = {"far ahead (0.75 vs 0.40)": (0.75, 0.40), "ahead (0.70 vs 0.45)": (0.70, 0.45)}


def copy_for(r: float):
    """The tie probability per seed that gives twin correlation r (measured: greedy 0.80 at 0.8, sampled 0.80
    at 0.51; 0 at 0)."""
    if r == 0:
        return lambda cfg: 0.0
    if r != 0.8:
        raise ValueError("measured for r = 0.8 and r = 0 only")
    return lambda cfg: 0.8 if cfg.decoding == "greedy" else 0.51


def costly_and_cheap(result) -> tuple[int, int]:
    split = by_scoring(result.evaluated)  # what cost.json's model_evaluations_by_scoring says
    return split["free_form"], split["logprob"]


def synthetic(grids: int) -> tuple[list[str], list[dict]]:
    lines = [
        f"{'scenario':<26} {'r':>4} {'control':<7} {'verdicts':<30} {'same':>5} {'claims':>6} {'costly':>8} "
        f"{'cheap':>8} {'model time':>10} {'s/grid':>6}"
    ]
    rows = []
    for name, acc in SCENARIOS.items():
        for r in (0.8, 0.0):
            worlds = [correlated_problem(np.random.default_rng(200 + g), acc, copy_for(r)) for g in range(grids)]
            measured = np.mean([np.mean(list(twin_correlation(p, o).values())) for p, o, _ in worlds])
            verdicts: dict[str, list[str]] = {}
            for control in ("none", "auto"):
                costly = cheap = claims = 0
                spent, said, t0 = 0.0, [], time.perf_counter()
                for g, (problem, oracle, _) in enumerate(worlds):
                    costed = CostedOracle(oracle, known=True)
                    options = CertifyOptions(seed=g, round_seconds=60.0, control=control)
                    result = certify([problem], costed, options)
                    c, k = costly_and_cheap(result)
                    costly, cheap, spent = costly + c, cheap + k, spent + costed.spent()
                    claims += sum(x.claim != "undecided" for x in result.claims)
                    said.append(result.pairs[0].verdict)
                verdicts[control] = said
                same = sum(a == b for a, b in zip(verdicts["none"], said, strict=True))
                counted = ", ".join(f"{v} {n}" for v, n in Counter(said).most_common())
                seconds = (time.perf_counter() - t0) / grids
                lines.append(
                    f"{name:<26} {measured:>4.2f} {control:<7} {counted:<30} {same:>5} {claims:>6} {costly:>8,} "
                    f"{cheap:>8,} {spent:>10,.0f} {seconds:>6.2f}"
                )
                rows.append(
                    dict(scenario=name, r=r, control=control, costly=costly, cheap=cheap, time=spent, same=same)
                )
    return lines, rows


SUBSET_SCENARIOS = {
    "far ahead (0.75 vs 0.40)": (300, lambda cfg, m: 0.75 if m == "a" else 0.40),
    "ahead (0.70 vs 0.45)": (300, lambda cfg, m: 0.70 if m == "a" else 0.45),
    "0.15 lead (0.65 vs 0.50)": (1000, lambda cfg, m: 0.65 if m == "a" else 0.50),
    "0.10 lead (0.60 vs 0.50)": (1000, lambda cfg, m: 0.60 if m == "a" else 0.50),
    "0.10 lead, 2,000 items": (2000, lambda cfg, m: 0.60 if m == "a" else 0.50),
}


POOL_SCENARIOS = {  # the population target: a 2,000-item subset whose twins score 18,000 more items (issue 56)
    "0.25 lead (0.70 vs 0.45)": ((2000, 18000), lambda cfg, m: 0.70 if m == "a" else 0.45),
    "0.15 lead (0.65 vs 0.50)": ((2000, 18000), lambda cfg, m: 0.65 if m == "a" else 0.50),
    "0.10 lead (0.60 vs 0.50)": ((2000, 18000), lambda cfg, m: 0.60 if m == "a" else 0.50),
    "0.15 lead, 300 of 1,500": ((300, 1200), lambda cfg, m: 0.65 if m == "a" else 0.50),
    "0.15 lead, no pool": ((2000, 0), lambda cfg, m: 0.65 if m == "a" else 0.50),  # partners from the back only
    "0.10 lead, no pool": ((2000, 0), lambda cfg, m: 0.60 if m == "a" else 0.50),
}


GREEDY_SCENARIOS = {k: v for k, v in POOL_SCENARIOS.items() if "no pool" not in k}


def subset(grids: int) -> tuple[list[str], list[dict]]:
    """The subset target (SubsetControl: the twin's whole subset, no partners), cost-aware rounds as above."""
    return by_pool(grids, SUBSET_SCENARIOS, "subset")


def population_pools(grids: int) -> tuple[list[str], list[dict]]:
    """The population target (partners) on large pools, the same configurations and rounds as subset()."""
    return by_pool(grids, POOL_SCENARIOS, "population")


def greedy_pools(grids: int) -> tuple[list[str], list[dict]]:
    """population_pools on the greedy configurations alone."""
    return by_pool(grids, GREEDY_SCENARIOS, "population", keep=greedy_short)


def grid_ceiling(problem, oracle, plain) -> float:
    """The most any control variate could save on this grid, as a share of the free-form evaluations: each
    free-form configuration's growth_ceiling on its own (D, C) law over the grid's items (subset and pool; five-seed
    means where it samples: their ceiling is far lower than greedy 0/1 answers'), weighted by the evaluations
    the plain run (`plain`, --control none) spent on it. Growth rates set expected items to a claim only when
    claims need many items, so read it as a bound where they do."""
    items = list(problem.item_ids) + list(problem.pool)
    a, b = problem.models
    spent = {cid: len(v) for (_, cid, model), v in plain.evaluated.items() if model == a}
    total = shares = 0.0
    for cid, twin in pairings(None, problem.config_ids).items():
        d = oracle(problem.benchmark, cid, a, items) - oracle(problem.benchmark, cid, b, items)
        c = oracle(problem.benchmark, twin, a, items) - oracle(problem.benchmark, twin, b, items)
        sign = 1.0 if d.mean() >= 0 else -1.0  # the ceiling against "theta <= 0" of the leading side
        law = pd.DataFrame({"d": np.round(sign * d, 9), "c": np.round(sign * c, 9)}).value_counts()
        dd, cc = (np.array([key[i] for key in law.index]) for i in (0, 1))
        rate, best = growth_ceiling(dd, cc, law.to_numpy(float))
        total += spent.get(cid, 0)
        shares += spent.get(cid, 0) * (rate / best if best > 0 else 1.0)
    return shares / total if total else 1.0


def by_pool(grids: int, scenarios: dict, target: str, keep=short) -> tuple[list[str], list[dict]]:
    lines = [
        f"{'scenario':<26} {'items':>5} {'r':>4} {'control':<7} {'verdicts':<26} {'same':>4} {'claims':>6} "
        f"{'costly':>8} {'share':>6} {'cheap':>8} {'model time':>10} {'share':>6}"
        + (f" {'ceiling':>7}" if target == "population" else "")
    ]
    rows = []
    for name, (size, acc) in scenarios.items():
        n_items, beyond = size if isinstance(size, tuple) else (size, 0)  # (subset, pool beyond it)
        for r in (0.8, 0.0):
            worlds = [
                correlated_problem(
                    np.random.default_rng(400 + g), acc, copy_for(r), n_items=n_items + beyond, subset=n_items
                )
                for g in range(grids)
            ]
            measured = np.mean([np.mean(list(twin_correlation(keep(p), o).values())) for p, o, _ in worlds])
            base: dict[str, float] = {}
            verdicts: dict[str, list[str]] = {}
            ceiling: list[tuple[float, int]] = []  # per grid: its ceiling share, the plain run's costly evaluations
            for control in ("none", "auto", "time") if target == "population" else ("none", "auto"):
                costly = cheap = claims = 0
                spent, said = 0.0, []
                for g, (problem, oracle, _) in enumerate(worlds):
                    costed = CostedOracle(oracle, known=True)
                    options = CertifyOptions(seed=g, round_seconds=60.0, control=control, target=target)
                    result = certify([keep(problem)], costed, options)
                    c, k = costly_and_cheap(result)
                    if control == "none" and target == "population":
                        ceiling.append((grid_ceiling(keep(problem), oracle, result), c))
                    costly, cheap, spent = costly + c, cheap + k, spent + costed.spent()
                    claims += sum(x.claim != "undecided" for x in result.claims)
                    said.append(result.pairs[0].verdict)
                verdicts[control] = said
                base.setdefault("costly", costly)
                base.setdefault("time", spent)
                same = sum(a == b for a, b in zip(verdicts["none"], said, strict=True))
                counted = ", ".join(f"{v} {n}" for v, n in Counter(said).most_common())
                lines.append(
                    f"{name:<26} {n_items:>5} {abs(measured):>4.2f} {control:<7} {counted:<26} {same:>4} {claims:>6} "
                    f"{costly:>8,} {costly / base['costly']:>6.3f} {cheap:>8,} {spent:>10,.0f} "
                    f"{spent / base['time']:>6.3f}" + (f" {_weighted(ceiling):>7.3f}" if ceiling else "")
                )
                rows.append(
                    dict(
                        scenario=name,
                        items=n_items,
                        r=r,
                        control=control,
                        costly=costly,
                        cheap=cheap,
                        time=spent,
                        ceiling=_weighted(ceiling) if ceiling else np.nan,
                    )
                )
    return lines, rows


def _weighted(ceiling: list[tuple[float, int]]) -> float:
    """The grids' ceiling shares, weighted by their plain runs' costly evaluations (as the table's share sums)."""
    total = sum(n for _, n in ceiling)
    return sum(share * n for share, n in ceiling) / total if total else 1.0


def _joint(pa: float, pb: float, q: float, seeds: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The law of (D, C) for one item: each model's log-probability answer ~ Bernoulli(p), each of its `seeds`
    free-form answers that answer with probability q, else a fresh Bernoulli(p), D the difference of the seed
    means; the two models independent (greedy: one seed, q = 0.8; sampled: five seeds, q = 0.51, copy_for)."""
    from math import comb

    def model(p):
        out: dict[tuple[float, int], float] = {}
        for lp in (0, 1):
            p_lp = p if lp else 1 - p
            one = q * lp + (1 - q) * p  # a seed's free-form answer is right
            for right in range(seeds + 1):
                key = (right / seeds, lp)
                out[key] = out.get(key, 0.0) + p_lp * comb(seeds, right) * one**right * (1 - one) ** (seeds - right)
        return out

    d, c, w = [], [], []
    for (fa, la), wa in model(pa).items():
        for (fb, lb), wb in model(pb).items():
            d.append(fa - fb)
            c.append(la - lb)
            w.append(wa * wb)
    return np.array(d, float), np.array(c, float), np.array(w)


def _draws(rng, n_streams: int, n: int, pa: float, pb: float, q: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """(D, C) for n_streams x n items drawn from _joint's law (r about 0.8 at q = 0.8)."""
    d, c, w = _joint(pa, pb, q)
    pick = rng.choice(len(w), size=(n_streams, n), p=w)
    return d[pick], c[pick]


def _wor_stops(d, c, alpha: float, mode: str) -> np.ndarray:
    """Items to a claim (lower bound above 0) of each WorBettingCS stream: plain steps, the controlled steps'
    stake with no control (gamma 0: aGRAPA, truncation 0.9), or the control (gamma the least-squares slope from
    earlier items, from the 10th)."""
    from safetyrepro.sequential.confidence_sequence import WorBettingCS

    streams, n = d.shape
    cs = WorBettingCS(streams, n, alpha)
    stop = np.full(streams, n)
    done = np.zeros(streams, dtype=bool)
    fit = np.zeros((streams, 5))
    tail = np.cumsum(c[:, ::-1], axis=1)[:, ::-1]  # sum of the cheap scores from item t on
    for t in range(n):
        live = np.flatnonzero(~done)
        if not len(live):
            break
        di, ci = d[live, t], c[live, t]
        if mode == "plain":
            cs.update(live, di)
        else:
            fitted = slope(fit[live], np.full(len(live), max(t, 1))) if t >= 10 else np.zeros(len(live))
            gamma = np.clip(fitted, -1, 1) if mode == "control" else np.zeros(len(live))
            rest = tail[live, t] / (n - t)
            cs.update(live, di, gamma=gamma, deviation=ci - rest, deviation_span=np.full(len(live), 2.0))
        fit[live] += np.stack([di, ci, di * di, ci * ci, di * ci], axis=1)
        won = live[cs.bounds().lower[live] > 0]
        stop[won], done[won] = t + 1, True
    return stop


def _iid_stops(d, c, partners, alpha: float, mode: str, pool: int) -> np.ndarray:
    """Items to a claim of each ControlledBettingCS stream on a large pool: plain steps, partner steps with gamma
    forced to 0 (their aGRAPA stake, no control), or the control as certify runs it (partners_wanted)."""
    from safetyrepro.sequential.control_variate import ControlledBettingCS

    streams, n = d.shape
    cs = ControlledBettingCS(streams, alpha, beyond=pool)  # partners from a pool beyond the subset
    if mode == "stake":
        cs.gamma = lambda s, k: np.zeros(len(np.atleast_1d(s)))  # type: ignore[method-assign]
    stop = np.full(streams, n)
    done = np.zeros(streams, dtype=bool)
    for t in range(n):
        live = np.flatnonzero(~done)
        if not len(live):
            break
        k = np.zeros(len(live), dtype=np.int64)
        if mode != "plain":
            k = np.where(t >= 10, cs.partners_wanted(live, np.full(len(live), 10**6), np.full(len(live), 10**6)), 0)
        p = np.where(np.arange(partners.shape[2])[None, :] < k[:, None], partners[live, t], np.nan)
        cs.update(live, d[live, t], c[live, t], p)
        won = live[cs.bounds(alpha)[0][live] > 0]
        stop[won], done[won] = t + 1, True
    return stop


def stakes(streams: int = 40) -> list[str]:
    """How much of the control's saving is the controlled steps' stake (aGRAPA) rather than the control itself:
    one stream per (configuration, pair) without rounds, r about 0.8, at certify's usual first step
    (0.05 / 96 a side), items to a claim summed over the streams."""
    alpha = 0.05 / 96
    rng = np.random.default_rng(11)
    lines = [
        f"{'target':<11} {'items':>6} {'lead':>5} {'plain':>7} {'stake only':>10} {'control':>8} "
        f"{'stake/plain':>11} {'control/plain':>13} {'control/stake':>13}"
    ]
    cases = [("subset", 1000, 0.65, 0.5), ("subset", 1000, 0.6, 0.5), ("subset", 2000, 0.6, 0.5)]
    cases += [("population", 20000, 0.65, 0.5), ("population", 20000, 0.6, 0.5)]
    for target, n, pa, pb in cases:
        if target == "subset":
            d, c = _draws(rng, streams, n, pa, pb)
            got = {mode: int(_wor_stops(d, c, alpha, mode).sum()) for mode in ("plain", "stake", "control")}
        else:
            steps = 4000  # the claims end well before: the pool (n) sets the partners a step and their cap
            d, c = _draws(rng, streams, steps, pa, pb)
            mates = np.stack([_draws(rng, streams, steps, pa, pb)[1] for _ in range(partners_per_step(n))], axis=2)
            got = {mode: int(_iid_stops(d, c, mates, alpha, mode, n).sum()) for mode in ("plain", "stake", "control")}
        lines.append(
            f"{target:<11} {n:>6,} {pa - pb:>5.2f} {got['plain']:>7,} {got['stake']:>10,} {got['control']:>8,} "
            f"{got['stake'] / got['plain']:>11.3f} {got['control'] / got['plain']:>13.3f} "
            f"{got['control'] / got['stake']:>13.3f}"
        )
    return lines


def ceilings() -> list[str]:
    lines = [
        f"{'accuracies':<12} {'difference':>10} {'decoding':<20} {'plain':>7} {'ceiling':>7} {'most saved':>10} "
        f"{'least share':>11}  (r = 0.8)"
    ]
    for pa, pb in ((0.75, 0.40), (0.70, 0.45), (0.65, 0.50), (0.60, 0.50)):
        for decoding, q, seeds in (("greedy", 0.8, 1), ("sampled, 5-seed mean", 0.51, 5)):
            plain, best = growth_ceiling(*_joint(pa, pb, q, seeds))
            lines.append(
                f"{pa:.2f} / {pb:.2f}  {pa - pb:>10.2f} {decoding:<20} {plain:>7.4f} {best:>7.4f} "
                f"{best / plain:>9.2f}x {plain / best:>11.2f}"
            )
    return lines


def published() -> list[str]:
    from safetyrepro.certify.replay import load_replay
    from safetyrepro.grid.grid_io import load_grid
    from safetyrepro.tasks.envelope import default_rules

    lines = []
    grid = load_grid(ROOT / "study/grid.csv", default_rules())
    replay = load_replay(ROOT / "study/items.parquet", grid)
    for target in ("population", "subset"):
        for control in ("none", "auto"):
            result = certify(list(replay.problems), replay.oracle, CertifyOptions(control=control, target=target))
            costly, cheap = costly_and_cheap(result)
            said = Counter(p.verdict for p in result.pairs)
            lines.append(
                f"24-item study, replayed, --target {target} --control {control:<4}: {dict(said)}, "
                f"{result.paired_evaluations:,} paired evaluations, {costly:,} costly and {cheap:,} cheap model "
                "evaluations"
            )
    reread = [  # the certified study's records, re-read as perf/certify_power.py does (no model runs)
        *"certify --models smollm2 gemma3-270m qwen2.5-coder-0.5b --tier full --precision fp32 --order subset".split(),
        *"--records study study/certified --held-only --quiet".split(),
    ]
    for control in ("none", "auto"):
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, "-m", "safetyrepro.cli", *reread, "--control", control, "--out", tmp]
            subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
            cost = json.loads((Path(tmp) / "cost.json").read_text())
            claims = int((pd.read_csv(Path(tmp) / "claims.csv")["claim"] != "undecided").sum())
        lines.append(
            f"certified study, re-read (--held-only), --control {control:<4}: {claims} claims, "
            f"{cost['paired_evaluations']:,} paired and {cost['model_evaluations']:,} model evaluations read; the "
            f"control ran on {len(cost['control_did'])} benchmarks (a re-read holds no partner items)"
        )
    for name, path in (
        ("24-item study", "study/items.parquet"),
        ("certified study", "study/certified/items.parquet"),
    ):
        r = twin_correlations(pd.read_parquet(ROOT / path))
        summary = r.groupby("benchmark")["r"].agg(["count", "median"])
        said = "; ".join(f"{b} median r {row['median']:.2f} over {int(row['count'])}" for b, row in summary.iterrows())
        n = r["items"].median()
        lines.append(f"{name}: twin correlation (median {n:.0f} common items a pair): {said}")
    return lines


def figure(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from safetyrepro.atomic import atomic_write

    frame = pd.DataFrame(rows)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, (what, label) in zip(
        axes, (("costly", "costly (free-form) model evaluations"), ("time", "model time")), strict=True
    ):
        names = list(SCENARIOS)
        x = np.arange(len(names))
        for j, (r, control, colour) in enumerate(((0.8, "auto", "tab:green"), (0.0, "auto", "tab:grey"))):
            share = []
            for name in names:
                pick = (frame.scenario == name) & (frame.r == r)
                base = float(frame[pick & (frame.control == "none")][what].iloc[0])
                spent = float(frame[pick & (frame.control == control)][what].iloc[0])
                share.append(spent / base if base else np.nan)  # a flip the free items decide costs nothing
            ax.bar(x + (j - 0.5) * 0.38, share, 0.38, color=colour, label=f"--control auto, r = {r:g}")
        if what == "costly":  # the most any control variate saves on one greedy configuration there (ceilings())
            for i, name in enumerate(names):
                if name in CEILING_ACCURACIES:
                    plain, best = growth_ceiling(*_joint(*CEILING_ACCURACIES[name], 0.8))
                    ax.plot([i - 0.4, i + 0.4], [plain / best] * 2, color="black", linestyle=":", linewidth=1.5)
            ax.plot([], [], color="black", linestyle=":", label="ceiling, r = 0.8 (greedy)")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(0.5, color="tab:red", linewidth=0.8, linestyle="--", label="half (the issue's target)")
        ax.set_xticks(x, [n.split(" (")[0] for n in names], rotation=15, fontsize=8)
        ax.set_title(f"{label}, with the control / without", fontsize=9)
    axes[0].set_ylabel("share of --control none")
    axes[0].legend(fontsize=7, loc="lower left")
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=130, bbox_inches="tight"), root=path.parent)
    plt.close(fig)


def subset_figure(rows: list[dict], path: Path) -> None:
    """The subset target's table as bars: with the control, as a share of without, per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from safetyrepro.atomic import atomic_write

    frame = pd.DataFrame(rows)
    names = list(dict.fromkeys(frame.scenario))
    items = dict(zip(frame.scenario, frame["items"], strict=True))
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 3.4))
    bars = (("costly", 0.8, "tab:green"), ("time", 0.8, "tab:olive"), ("costly", 0.0, "tab:grey"))
    for j, (what, r, colour) in enumerate(bars):
        share = []
        for name in names:
            pick = (frame.scenario == name) & (frame.r == r)
            base = float(frame[pick & (frame.control == "none")][what].iloc[0])
            share.append(float(frame[pick & (frame.control == "auto")][what].iloc[0]) / base)
        label = f"{'free-form evaluations' if what == 'costly' else 'model time'}, r = {r:g}"
        ax.bar(x + (j - 1) * 0.27, share, 0.27, color=colour, label=label)
    ceiling = frame[(frame.r == 0.8) & (frame.control == "none")].set_index("scenario")["ceiling"]
    if ceiling.notna().any():  # the population target's grids: the least share any e-process could reach
        for i, name in enumerate(names):
            ax.plot([i - 0.4, i - 0.13], [ceiling[name]] * 2, color="black", linestyle=":", linewidth=1.5)
        ax.plot([], [], color="black", linestyle=":", label="ceiling, r = 0.8 (any e-process)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.5, color="tab:red", linewidth=0.8, linestyle="--", label="half (the issue's target)")
    ax.set_xticks(x, [f"{n.split(' (')[0].replace(', ', chr(10))}\n{items[n]:,} items" for n in names], fontsize=8)
    ax.set_ylabel("share of --control none")
    population = "--target population, pools beyond the subset or none,"
    target = "--target subset" if path.name.endswith("subset.png") else population
    ax.set_title(f"{target} --control auto: the same verdicts, as a share of without the control", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=130, bbox_inches="tight"), root=path.parent)
    plt.close(fig)


def _show(lines: list[str], rows: list[dict], draw, path: Path) -> None:
    for line in lines:
        print(line, flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    draw(rows, path)
    print(f"figure: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=10)
    ap.add_argument("--skip-published", action="store_true")
    ap.add_argument(
        "--only",
        choices=("population", "pools", "greedy", "subset", "published", "stakes"),
        help="one part: the population target's 300-item table and ceilings, its large pools (all configurations, "
        "or the greedy ones alone), the subset target's table, or the published records' lines",
    )
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "figures" / "certify_control.png")
    ap.add_argument("--subset-figure", type=Path, default=ROOT / "docs" / "figures" / "certify_control_subset.png")
    ap.add_argument("--pool-figure", type=Path, default=ROOT / "docs" / "figures" / "certify_control_pools.png")
    a = ap.parse_args()
    if a.only in (None, "population"):
        _show(*synthetic(a.grids), figure, a.figure)
        for line in ceilings():
            print(line, flush=True)
    if a.only in (None, "pools"):
        _show(*population_pools(a.grids), subset_figure, a.pool_figure)
    if a.only in (None, "greedy"):
        for line in greedy_pools(a.grids)[0]:
            print(line, flush=True)
    if a.only in (None, "subset"):
        _show(*subset(a.grids), subset_figure, a.subset_figure)
    if a.only in (None, "stakes"):
        for line in stakes():
            print(line, flush=True)
    if a.only == "published" or (a.only is None and not a.skip_published):
        for line in published():
            print(line, flush=True)


if __name__ == "__main__":
    main()
