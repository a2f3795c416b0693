"""`plan --certify`: the items certify's population sequences need, simulated on the very sequences certify runs
(safetyrepro/sequential/planning.py), from numbers (a lead, a flip, a margin, with a cheap twin), for a closeness
benchmark (--ideal), and from a pilot grid (its discordance and twin correlation), with the lines that say them.
Loaded by plan_cli only when plan runs."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from safetyrepro.analysis.paired.power import ASSUMED_DISCORDANCE, check_family
from safetyrepro.analysis.plan_words import percent, points
from safetyrepro.errors import UserError
from safetyrepro.grid.twins import MIN_ITEMS, closer_to, twin_correlations
from safetyrepro.sequential.planning import (
    ItemsToDecide,
    closeness_items_to_decide,
    controlled_items_to_decide,
    items_to_decide,
    kelly_items,
    least_twin_share,
    twin_share,
    z_items_needed,
)

CERTIFY_RUNS = 400  # simulated runs: the median and 80th percentile to a few items
CERTIFY_MAX_ITEMS = 3000  # a run not decided by then counts as never (BBQ's subset is 300, its pool 58,492)
MAX_SEEDS = 100  # sweeps run 1 (greedy) or 5 (sampled); each simulated item draws S uniforms per run
GRID_CERTIFY_RUNS = 200  # simulated runs a pair under plan GRID --certify: medians to within a few per cent


def plan_certify(args: argparse.Namespace, n: int | None) -> dict:
    """Items to a decision of certify's population sequences (sequential/planning.py), one pair over
    --configs configurations: the lead of --effect, a flip (two configurations with opposite leads), and with
    --margin the claim "within +-M"."""
    if args.margin is not None and not 0 < args.margin < 1:
        raise UserError(f"--margin {args.margin}: must be in (0, 1)")
    if args.effect <= 0 and args.margin is None:
        raise UserError("plan --certify: a lead to claim needs --effect > 0 (or give --margin for 'within')")
    if args.twin is not None and not (0 <= args.twin < 1 and args.effect > 0):
        raise UserError(
            f"--twin {args.twin:g}: the twin's correlation with the paired difference, in [0, 1), and a lead to "
            "claim (--effect > 0): the control helps claim a lead"
        )
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise UserError(f"--seeds {args.seeds}: a whole number of seeds from 1 to {MAX_SEEDS}")
    k = args.configs
    common = {"family": k, "alpha": args.alpha, "max_items": CERTIFY_MAX_ITEMS, "seeds": args.seeds}
    out: dict[str, object] = {"runs": CERTIFY_RUNS, "max_items": CERTIFY_MAX_ITEMS, "family": k, "seeds": args.seeds}
    if args.seeds > 1 and args.effect > 0:  # the exact sign test above is for 0/1 answers; means take the z-test
        out["z_items_needed"] = z_items_needed(args.discordance, args.effect, args.seeds, k, args.alpha, args.power)
    if args.effect > 0:
        lead = items_to_decide(args.discordance, args.effect, runs=2 * CERTIFY_RUNS, **common)
        flip = _flip(lead)
        out["lead"] = _summary(lead, n)
        out["flip"] = _summary(flip, n)
        kelly = kelly_items(args.discordance, args.effect, **common, runs=CERTIFY_RUNS)
        out["lead_knowing_the_law"] = _summary(kelly, n)
    if args.twin is not None:
        out["twin"] = _twin(args, common, n)
    if args.margin is not None:
        within = items_to_decide(args.discordance, args.effect, margin=args.margin, runs=CERTIFY_RUNS, **common)
        out["within"] = _summary(within, n) | {"margin": args.margin}
    return out


def _twin(args: argparse.Namespace, common: dict, n: int | None) -> dict:
    """Free-form items to the lead without and with the twin's help (`certify --control auto`, a pool beyond the
    subset), on the same simulated answers, and the least share any control could leave (the growth-optimal
    bound, the twin's law known: sequential/control_variate.py growth_ceiling)."""
    plain, helped = controlled_items_to_decide(
        args.discordance, args.effect, args.twin, runs=2 * CERTIFY_RUNS, **common
    )
    share, runs_both = twin_share(plain, helped)
    return {
        "r": args.twin,
        "without": _summary(plain, n),
        "with": _summary(helped, n),
        "share": share,
        "runs_both": runs_both,
        "runs": len(plain.items),
        "least_share": least_twin_share(args.discordance, args.effect, args.seeds, args.twin),
    }


def _flip(found):
    """Items to a flip from 2 x CERTIFY_RUNS runs of one lead: both wins of two configurations with that lead each
    way, the later of two runs (the first half's against the second's)."""
    one, other = found.items[:CERTIFY_RUNS], found.items[CERTIFY_RUNS:]
    return ItemsToDecide(np.maximum(one, other), CERTIFY_MAX_ITEMS)


def _summary(found, n: int | None) -> dict:
    q = {"median": found.quantile(0.5), "p80": found.quantile(0.8)}
    out: dict[str, object] = {k: (None if v == float("inf") else int(v)) for k, v in q.items()}
    if n is not None:
        out["share_within_items"] = found.share_within(n)
    return out


def _when(r: dict) -> str:
    if r["median"] is None:
        return f"not within {CERTIFY_MAX_ITEMS:,} items in half the runs"
    p80 = f"{r['p80']:,}" if r["p80"] is not None else f"over {CERTIFY_MAX_ITEMS:,}"
    share = r.get("share_within_items")
    within = f"; {percent(round(share, 3))} of runs within --items" if share is not None else ""
    return f"after a median of {r['median']:,} items (80 % of runs by {p80}{within})"


def certify_lines(r: dict) -> list[str]:
    c = r["certify"]
    scores = "0/1 answers" if c["seeds"] == 1 else f"item scores the mean of {c['seeds']} seeds"
    lines = [
        f"certify (population target, one pair over {c['family']} configuration{'s' if c['family'] != 1 else ''}, "
        f"alpha {r['alpha']:g}, {scores}; its own sequences on {c['runs']} simulated runs, items drawn one at a "
        f"time):"
    ]
    if "lead" in c:
        power = f"{percent(r['power'])} power"
        if c["seeds"] > 1:
            z, means = c["z_items_needed"], f"{c['seeds']}-seed means"
            fixed = f"the fixed-n paired z-test on {means} (Holm's first step) needs {z:,} items for {power}"
        elif r["items_needed"] is not None:
            fixed = f"the fixed-n test above needs {r['items_needed']:,} items for {power}"
        else:
            fixed = f"the fixed-n test above does not reach {power}"
        lines.append(
            f"- a {points(r['effect'])}-point lead is claimed {_when(c['lead'])}; {fixed}, but must fix n "
            f"first and cannot stop early"
        )
        lines.append(
            f"- no betting sequence claims it sooner on average than one that knows the law (the bound on any stake): "
            f"{_when(c['lead_knowing_the_law'])}"
        )
        each_way = f"two configurations with leads of {points(r['effect'])} points each way"
        lines.append(f"- a flip ({each_way}): {_when(c['flip'])}")
    if "twin" in c:
        lines += _twin_lines(c["twin"], r["effect"], c["seeds"])
    if "within" in c:
        m = c["within"]["margin"]
        when = f"never: the difference is not inside +-{points(m)}" if r["effect"] >= m else _when(c["within"])
        lines.append(f"- 'within +-{points(m)} points' when the true difference is {points(r['effect'])}: {when}")
    return lines


def _twin_lines(tw: dict, effect: float, seeds: int) -> list[str]:
    tied = f"; its {seeds} seeds copy one twin answer, so their means vary more than independent seeds'" * (seeds > 1)
    share = (
        ""
        if tw["share"] is None
        else f"with the twin certify takes {tw['share']:.2f} of the free-form items it takes without (summed over "
        f"the {tw['runs_both']} of {tw['runs']} runs that claim both ways); "
    )
    return [
        f"- with a log-probability twin correlated {tw['r']:g}, scored on items beyond the subset (certify --control "
        f"auto{tied}): the {points(effect)}-point lead is claimed {_when(tw['with'])} of the free-form "
        f"configuration, without the twin on the same answers {_when(tw['without'])}",
        f"- so {share}no control can take fewer than about {tw['least_share']:.2f} of them (the growth-optimal "
        "bound, the twin's law known)",
    ]


def plan_closeness(args: argparse.Namespace, n: int | None) -> dict:
    """Items to certify's claim of the model nearer --ideal, from the paired sign test certify runs on a closeness
    benchmark (sequential/planning.py closeness_items_to_decide), and to a flip."""
    a, b = args.shares
    if not 0 < args.ideal < 1:
        raise UserError(f"--ideal {args.ideal:g}: the share a better model sits nearer, in (0, 1)")
    agreement = a * b + (1 - a) * (1 - b) if args.agreement is None else args.agreement
    check_family(args.configs, args.alpha)
    lead = round(abs(b - args.ideal) - abs(a - args.ideal), 12)
    try:
        found = closeness_items_to_decide(
            a,
            b,
            agreement,
            ideal=args.ideal,
            family=args.configs,
            alpha=args.alpha,
            runs=2 * CERTIFY_RUNS,
            max_items=CERTIFY_MAX_ITEMS,
        )
    except ValueError as e:
        raise UserError(f"plan --ideal: {e}") from None
    first = ItemsToDecide(found.items[:CERTIFY_RUNS], CERTIFY_MAX_ITEMS)
    flip = _flip(found)
    return {
        "ideal": args.ideal,
        "shares": [a, b],
        "agreement": agreement,
        "configs": args.configs,
        "alpha": args.alpha,
        "nearer": "A" if lead > 0 else "B",
        "lead": abs(lead),
        "certify": {
            "runs": CERTIFY_RUNS,
            "max_items": CERTIFY_MAX_ITEMS,
            "family": args.configs,
            "lead": _summary(first, n),
            "flip": _summary(flip, n),
        },
    }


def closeness_lines(r: dict) -> list[str]:
    c, (a, b) = r["certify"], r["shares"]
    near, far = ("A", "B") if r["nearer"] == "A" else ("B", "A")
    return [
        f"certify (population target, nearness to {r['ideal']:g} by the paired sign test, one pair over "
        f"{c['family']} configuration{'s' if c['family'] != 1 else ''}, alpha {r['alpha']:g}; shares of 1 answers "
        f"A {a:g}, B {b:g}, alike on {r['agreement']:.3g} of items; its own sequences on {c['runs']} simulated runs, "
        f"items drawn one at a time):",
        f"- {near} nearer {r['ideal']:g} than {far} by {points(r['lead'])} points is claimed {_when(c['lead'])}",
        f"- a flip (two configurations with that lead each way): {_when(c['flip'])}",
    ]


def pilot_certify(rows: list[dict], items, args: argparse.Namespace) -> None:
    """certify's items to the lead of --effect for each pair at its pilot discordance and K (sequential/planning.py),
    and, where the pilot holds free-form configurations beside their log-probability twins, with `--control auto`
    at the pilot's median twin correlation (grid/twins.py): columns certify_median, twin_r, twin_median."""
    twins = twin_correlations(items)
    r_of = {
        (b, frozenset((a, m))): float(np.median(g["r"]))
        for (b, a, m), g in twins.groupby(["benchmark", "model_a", "model_b"])
    }
    for i, row in enumerate(rows, 1):
        row |= {"certify_median": None, "certify_p80": None, "twin_r": None, "twin_median": None}
        note = []
        ideal = closer_to(row["benchmark"])
        if ideal is not None:
            note.append(f"certify: plan --certify --ideal {ideal:g} --shares A B (closeness)")
        elif args.effect <= (row["discordance"] or ASSUMED_DISCORDANCE):
            pair = f"{row['benchmark']} {row['model_a']} vs {row['model_b']}"
            print(f"plan: certify's sequences for {pair} ({i} of {len(rows)})", file=sys.stderr)
            d = row["discordance"] or ASSUMED_DISCORDANCE
            common = dict(family=row["configs"], alpha=args.alpha, runs=GRID_CERTIFY_RUNS, max_items=CERTIFY_MAX_ITEMS)
            found = items_to_decide(d, args.effect, **common)
            summary = _summary(found, None)
            row["certify_median"], row["certify_p80"] = summary["median"], summary["p80"]
            r = r_of.get((row["benchmark"], frozenset((row["model_a"], row["model_b"]))))
            if r is not None:
                row["twin_r"] = r
                helped = controlled_items_to_decide(d, args.effect, max(r, 0.0), **common)[1]
                row["twin_median"] = _summary(helped, None)["median"]
            else:
                note.append(
                    f"no twin: the pilot has no free-form configuration beside its log-probability twin on "
                    f"{MIN_ITEMS}+ common items for this pair"
                )
        row["note"] = "; ".join(x for x in (row["note"], *note) if x)


def certify_cells(r: dict) -> list[str]:
    def items(n):
        return f"over {CERTIFY_MAX_ITEMS:,}" if n is None else f"{n:,}"

    if r["certify_median"] is None and r["certify_p80"] is None and r["twin_r"] is None:
        return ["-", "-"]
    twin = "-" if r["twin_r"] is None else f"{items(r['twin_median'])} ({r['twin_r']:.2f})"
    return [items(r["certify_median"]), twin]


def certify_note() -> str:
    """plan GRID --certify's line above its table: what the two certify columns are."""
    return (
        f"certify: its population sequences' median items to claim the lead on 0/1 answers at the pilot's "
        f"discordance ({GRID_CERTIFY_RUNS} simulated runs, 'over {CERTIFY_MAX_ITEMS:,}' where half do not by "
        f"then); with twin: --control auto, the free-form configurations' log-probability twins correlated r (the "
        f"pilot's median) and scored beyond the subset."
    )
