"""`safetyrepro plan`: how many items per configuration a paired verdict needs, and what a pilot grid
can detect (analysis/paired/power.py has the model). Only argparse (and the stdlib-only timing reader) is imported
at start-up."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from safetyrepro.console import duration
from safetyrepro.grid.cell_timing import seconds_per_item  # no imports of its own: start-up stays light

DEFAULT_EFFECT = 0.10


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="items per configuration a paired verdict needs; what a pilot grid can detect",
        description="Power of the per-configuration verdict (exact paired sign test on the discordant items, Holm "
        "over K configurations), see docs/analysis.md, 'Power and the detectable difference'. Two forms: "
        "`plan --discordance D --configs K [--effect E] [--items N]` from numbers, or "
        "`plan GRID [--items ITEMS]` from a pilot sweep's grid and item records.",
    )
    p.add_argument(
        "grid",
        nargs="?",
        metavar="GRID",
        help="a pilot's grid.csv or grid.parquet; its discordance, "
        "configuration count, item count and (from the cells/ folder beside it) seconds per item are used",
    )
    p.add_argument(
        "--items",
        metavar="N|ITEMS",
        help="without GRID: an item count N at which to report the power and "
        "the detectable difference; with GRID: the pilot's item records (default: items.parquet or "
        "items.csv beside the grid)",
    )
    p.add_argument(
        "--discordance",
        type=float,
        metavar="D",
        help="share of items on which the two models' 0/1 answers differ, in (0, 1] (without GRID; required there)",
    )
    p.add_argument(
        "--configs",
        type=int,
        metavar="K",
        help="configurations in the Holm family, e.g. 48 (without GRID; required there)",
    )
    p.add_argument(
        "--effect",
        type=float,
        default=None,
        metavar="E",
        help=f"true paired difference in accuracy to find, at most D (default {DEFAULT_EFFECT})",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="familywise error level (default 0.05)")
    p.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    p.add_argument(
        "--certify",
        action="store_true",
        help="without GRID: also the items certify's population sequences need to claim the lead (and, with "
        "--margin, to claim two models within it), simulated on the very sequences certify runs",
    )
    p.add_argument(
        "--margin",
        type=float,
        metavar="M",
        help="with --certify: the items to claim 'within +-M' when the true difference is --effect (e.g. 0)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        metavar="S",
        help="with --certify: each model's item score is the mean of S seeds' 0/1 answers (a sampled "
        "configuration's; discordance and effect are per seed), default 1 (greedy decoding)",
    )
    p.add_argument(
        "--twin",
        type=float,
        metavar="R",
        help="with --certify: also the free-form items to the lead with `certify --control auto`, its "
        "log-probability twin correlated R with the item score's paired difference and scored on items beyond "
        "the subset (e.g. 0.8)",
    )
    p.add_argument(
        "--ideal",
        type=float,
        metavar="X",
        help="with --certify: plan a closeness benchmark (CrowS-Pairs: 0.5), where the better model's share of 1 "
        "answers sits nearer X; give --shares (and --agreement) instead of --discordance and --effect",
    )
    p.add_argument(
        "--shares",
        type=float,
        nargs=2,
        metavar=("A", "B"),
        help="with --ideal: each model's share of 1 answers (CrowS-Pairs: the stereotyped sentence preferred)",
    )
    p.add_argument(
        "--agreement",
        type=float,
        metavar="R",
        help="with --ideal: the share of items both models answer alike (default: as if independent)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def _refuse_unused(args: argparse.Namespace) -> None:
    """Flags that would change nothing in the form asked for are refused rather than ignored."""
    from safetyrepro.errors import UserError

    if args.ideal is not None:
        _refuse_for_closeness(args)
        return
    closeness = [f for f, on in (("--shares", args.shares), ("--agreement", args.agreement is not None)) if on]
    if closeness:
        raise UserError(f"{', '.join(closeness)}: used only with --ideal (a closeness benchmark); add --ideal 0.5")
    certify_only = (
        ("--margin", args.margin is not None),
        ("--seeds", args.seeds != 1),
        ("--twin", args.twin is not None),
    )
    given = [f for f, on in certify_only if on]
    if args.grid and given:
        raise UserError(
            f"plan GRID --certify reads the discordance and the twins' correlation off the pilot ({', '.join(given)} "
            f"are the numbers form's), e.g. safetyrepro plan --certify --discordance 0.3 --configs 48 --effect 0.15 "
            f"--twin 0.8"
        )
    if given and not args.certify:
        raise UserError(f"{', '.join(given)}: used only with --certify (what certify's sequences need); add --certify")


def _refuse_for_closeness(args: argparse.Namespace) -> None:
    """--ideal plans from the two shares alone: the flags of the other forms, or a missing one, are one line."""
    from safetyrepro.errors import UserError

    others = (
        ("GRID", args.grid),
        ("--discordance", args.discordance is not None),
        ("--effect", args.effect is not None),
        ("--margin", args.margin is not None),
        ("--seeds", args.seeds != 1),
        ("--twin", args.twin is not None),
    )
    wrong = [f for f, on in others if on]
    if not args.certify or wrong or not args.shares or args.configs is None:
        raise UserError(
            "--ideal plans certify's paired sign test for a closeness benchmark from the two models' shares: "
            "safetyrepro plan --certify --ideal 0.5 --shares 0.55 0.70 [--agreement 0.7] --configs 12 "
            f"[--items N]{' (not ' + ', '.join(wrong) + ')' if wrong else ''}"
        )


def run(args: argparse.Namespace) -> int:
    import json

    _refuse_unused(args)
    if args.effect is None:  # None until here: --ideal refuses a given one
        args.effect = DEFAULT_EFFECT
    if args.grid:
        rows = plan_from_grid(args)
        print(json.dumps(rows, indent=2) if args.json else "\n".join(grid_lines(rows, args)))
    elif args.ideal is not None:
        r = plan_closeness(args)
        print(json.dumps(r, indent=2) if args.json else "\n".join(closeness_lines(r)))
    else:
        alike = _within_only(args)
        numbers = within_only(args) if alike else plan_from_numbers(args)
        if args.certify:
            numbers["certify"] = plan_certify(args)
        fixed = [] if alike else number_lines(numbers)
        if args.certify and args.seeds > 1 and fixed:  # the fixed-n lines are the 0/1 sign test's, not the means'
            fixed[0] = f"On 0/1 answers (one seed; {args.seeds}-seed means below): {fixed[0]}"
        lines = fixed + (certify_lines(numbers) if args.certify else [])
        print(json.dumps(numbers, indent=2) if args.json else "\n".join(lines))
    return 0


# -- from numbers ----------------------------------------------------------------------------------
def _item_count(text: str | None) -> int | None:
    from safetyrepro.analysis.paired.power import MAX_ITEMS
    from safetyrepro.errors import UserError

    if text is None:
        return None
    n: int | None
    try:
        n = int(text)
    except ValueError:
        try:  # 1e5 is a whole number too
            f = float(text)
            n = int(f) if f.is_integer() else None
        except (ValueError, OverflowError):
            n = None
    if n is None:
        raise UserError(
            f"--items {text!r}: without GRID, --items is an item count (a whole number >= 1); to plan "
            f"from a pilot's records give its grid: safetyrepro plan GRID --items ITEMS"
        )
    if n < 1:
        raise UserError(f"--items {n}: an item count must be a whole number >= 1")
    if n > MAX_ITEMS:  # the power's law of M is tabulated up to n: beyond this it would not fit in memory
        raise UserError(
            f"--items {text}: at most {MAX_ITEMS:,} items per configuration (the range plan computes and "
            f"searches); no benchmark subset is larger"
        )
    return n


def _within_only(args: argparse.Namespace) -> bool:
    """`--certify --margin M --effect 0`: two models alike, where there is no difference to find and only the claim
    "within +-M" to plan."""
    return bool(args.certify and args.margin is not None and args.effect == 0)


def within_only(args: argparse.Namespace) -> dict:
    """The numbers form's settings, checked, without the fixed-n test's items (it finds differences; there is none)."""
    from safetyrepro.analysis.paired.power import check_design

    check_design(args.discordance, args.configs, args.alpha)
    keys = ("discordance", "effect", "configs", "alpha", "power")
    return {k: getattr(args, k) for k in keys}


def plan_from_numbers(args: argparse.Namespace) -> dict:
    """The JSON object of the numbers form: items needed, and at --items N the power and the detectable
    difference."""
    from safetyrepro.analysis.paired.power import MODEL, TEST, detectable_difference, items_needed, power
    from safetyrepro.errors import UserError

    absent = [flag for flag, v in (("--discordance", args.discordance), ("--configs", args.configs)) if v is None]
    if absent:
        raise UserError(
            f"plan needs {' and '.join(absent)} (or a pilot GRID instead): e.g. safetyrepro plan "
            f"--discordance 0.3 --configs 48 --effect 0.1"
        )
    n = _item_count(args.items)
    need = items_needed(args.discordance, args.effect, args.configs, args.alpha, args.power)
    out: dict[str, object] = {
        "items_needed": need.n_items,
        "discordance": need.discordance,
        "effect": need.effect,
        "configs": need.n_configs,
        "alpha": need.alpha,
        "power": need.power,
        "power_at_items_needed": need.achieved,
    }
    if need.n_items is None:
        out["note"] = need.reason
    if n is not None:
        at = power(n, args.discordance, args.effect, args.configs, args.alpha)
        dd = detectable_difference(n, args.discordance, args.configs, args.alpha, args.power)
        out |= {
            "items": n,
            "power_at_items": at.power,
            "power_at_items_two_sided": at.power_two_sided,
            "detectable_difference_at_items": dd.effect,
        }
        if dd.effect is None:
            out["detectable_difference_note"] = dd.reason
    return out | {"test": TEST, "model": MODEL}


def _points(e: float) -> str:
    return f"{e * 100:.3g}"


def _percent(p: float) -> str:
    return f"{p * 100:g} %"


def _prob(p: float) -> str:
    """0.423, but 0.00072 rather than 0.001: a small power is still a number, not a rounding."""
    return f"{p:.3f}" if p == 0 or p >= 0.01 else f"{p:.2g}"


def _two(x: float) -> str:
    """0.3 as 0.30, but 0.125 as 0.125: never hide a digit the user gave."""
    return f"{x:.2f}" if round(x, 2) == x else f"{x:.3g}"


def number_lines(r: dict) -> list[str]:
    setting = (
        f"To find a {_points(r['effect'])}-point paired difference at {_percent(r['power'])} power with "
        f"discordance {_two(r['discordance'])} under Holm over {r['configs']} configuration"
        f"{'s' if r['configs'] != 1 else ''} (alpha {r['alpha']:g}, exact paired sign test): "
    )
    need = (
        f"{r['items_needed']:,} items per configuration (power there {_prob(r['power_at_items_needed'])})."
        if r["items_needed"] is not None
        else f"not reachable ({r['note']})."
    )
    lines = [setting + need]
    if "items" in r:
        dd = r["detectable_difference_at_items"]
        found = (
            f"the smallest difference found at {_percent(r['power'])} power is {dd:.3f} ({_points(dd)} points)"
            if dd is not None
            else r["detectable_difference_note"]
        )
        lines.append(
            f"At {r['items']:,} items per configuration: power {_prob(r['power_at_items'])} for a "
            f"{_points(r['effect'])}-point difference ({_prob(r['power_at_items_two_sided'])} counting a claim "
            f"in either direction); {found}."
        )
    return lines


# -- certify's sequences ---------------------------------------------------------------------------
CERTIFY_RUNS = 400  # simulated runs: the median and 80th percentile to a few items
CERTIFY_MAX_ITEMS = 3000  # a run not decided by then counts as never (BBQ's subset is 300, its pool 58,492)
MAX_SEEDS = 100  # sweeps run 1 (greedy) or 5 (sampled); each simulated item draws S uniforms per run


def plan_certify(args: argparse.Namespace) -> dict:
    """Items to a decision of certify's population sequences (sequential/planning.py), one pair over
    --configs configurations: the lead of --effect, a flip (two configurations with opposite leads), and with
    --margin the claim "within +-M"."""

    from safetyrepro.errors import UserError
    from safetyrepro.sequential.planning import items_to_decide, kelly_items, z_items_needed

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
        out["lead"] = _summary(lead, args.items)
        out["flip"] = _summary(flip, args.items)
        kelly = kelly_items(args.discordance, args.effect, **common, runs=CERTIFY_RUNS)
        out["lead_knowing_the_law"] = _summary(kelly, args.items)
    if args.twin is not None:
        out["twin"] = _twin(args, common)
    if args.margin is not None:
        within = items_to_decide(args.discordance, args.effect, margin=args.margin, runs=CERTIFY_RUNS, **common)
        out["within"] = _summary(within, args.items) | {"margin": args.margin}
    return out


def _twin(args: argparse.Namespace, common: dict) -> dict:
    """Free-form items to the lead without and with the twin's help (`certify --control auto`, a pool beyond the
    subset), on the same simulated answers, and the least share any control could leave (the growth-optimal
    bound, the twin's law known: sequential/control_variate.py growth_ceiling)."""
    import numpy as np

    from safetyrepro.sequential.control_variate import growth_ceiling
    from safetyrepro.sequential.planning import controlled_items_to_decide, twin_law

    plain, helped = controlled_items_to_decide(
        args.discordance, args.effect, args.twin, runs=2 * CERTIFY_RUNS, **common
    )
    rate, best = growth_ceiling(*twin_law(args.discordance, args.effect, args.seeds, args.twin))
    both = np.isfinite(plain.items) & np.isfinite(helped.items)
    return {
        "r": args.twin,
        "without": _summary(plain, args.items),
        "with": _summary(helped, args.items),
        "share": float(helped.items[both].sum() / plain.items[both].sum()) if both.any() else None,
        "runs_both": int(both.sum()),
        "runs": len(both),
        "least_share": rate / best if best > 0 else 1.0,
    }


def _flip(found):
    """Items to a flip from 2 x CERTIFY_RUNS runs of one lead: both wins of two configurations with that lead each
    way, the later of two runs (the first half's against the second's)."""
    import numpy as np

    from safetyrepro.sequential.planning import ItemsToDecide

    one, other = found.items[:CERTIFY_RUNS], found.items[CERTIFY_RUNS:]
    return ItemsToDecide(np.maximum(one, other), CERTIFY_MAX_ITEMS)


def _summary(found, items: str | None) -> dict:
    n = _item_count(items)
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
    within = f"; {_percent(round(share, 3))} of runs within --items" if share is not None else ""
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
        power = f"{_percent(r['power'])} power"
        if c["seeds"] > 1:
            z, means = c["z_items_needed"], f"{c['seeds']}-seed means"
            fixed = f"the fixed-n paired z-test on {means} (Holm's first step) needs {z:,} items for {power}"
        elif r["items_needed"] is not None:
            fixed = f"the fixed-n test above needs {r['items_needed']:,} items for {power}"
        else:
            fixed = f"the fixed-n test above does not reach {power}"
        lines.append(
            f"- a {_points(r['effect'])}-point lead is claimed {_when(c['lead'])}; {fixed}, but must fix n "
            f"first and cannot stop early"
        )
        lines.append(
            f"- no betting sequence claims it sooner on average than one that knows the law (the bound on any stake): "
            f"{_when(c['lead_knowing_the_law'])}"
        )
        each_way = f"two configurations with leads of {_points(r['effect'])} points each way"
        lines.append(f"- a flip ({each_way}): {_when(c['flip'])}")
    if "twin" in c:
        lines += _twin_lines(c["twin"], r["effect"], c["seeds"])
    if "within" in c:
        m = c["within"]["margin"]
        when = f"never: the difference is not inside +-{_points(m)}" if r["effect"] >= m else _when(c["within"])
        lines.append(f"- 'within +-{_points(m)} points' when the true difference is {_points(r['effect'])}: {when}")
    return lines


def plan_closeness(args: argparse.Namespace) -> dict:
    """Items to certify's claim of the model nearer --ideal, from the paired sign test certify runs on a closeness
    benchmark (sequential/planning.py closeness_items_to_decide), and to a flip."""

    from safetyrepro.analysis.paired.power import check_family
    from safetyrepro.errors import UserError
    from safetyrepro.sequential.planning import ItemsToDecide, closeness_items_to_decide

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
            "lead": _summary(first, args.items),
            "flip": _summary(flip, args.items),
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
        f"- {near} nearer {r['ideal']:g} than {far} by {_points(r['lead'])} points is claimed {_when(c['lead'])}",
        f"- a flip (two configurations with that lead each way): {_when(c['flip'])}",
    ]


# -- from a pilot grid -----------------------------------------------------------------------------
def _pilot_tables(grid_path: Path, items_arg: str | None):
    """The grid's ok cells (one precision/package group) and the item records of those cells."""
    import pandas as pd

    from safetyrepro.errors import UserError
    from safetyrepro.grid.grid_io import ITEM_FILES, beside_grid, read_table, select_group
    from safetyrepro.grid.item_validation import ITEM_COLUMNS, checked_records

    grid = read_table(grid_path)
    missing = [c for c in ("model", "config_id") if c not in grid.columns]
    if missing:
        raise UserError(f"grid {grid_path} lacks column(s) {', '.join(missing)}")
    if {"precision", "package"} <= set(grid.columns):
        grid = select_group(grid, str(grid_path))
    if "status" in grid.columns:
        grid = grid[grid["status"].fillna("ok").astype(str).isin(["ok", ""])]
    items_arg = items_arg or beside_grid(grid_path, ITEM_FILES)
    if items_arg is None:
        raise UserError(f"no items.parquet or items.csv beside {grid_path}; give the pilot's records with --items")
    items = read_table(items_arg, what="items")
    if {"n_items", "n_seeds", "scoring"} <= set(grid.columns) and set(ITEM_COLUMNS) <= set(items.columns):
        # the grid's group and cells only; repeats, stray seeds, short cells and off-lattice scores refused
        counts = {c: pd.to_numeric(grid[c], errors="coerce") for c in ("n_items", "n_seeds")}
        if any(v.isna().any() for v in counts.values()):
            raise UserError(f"grid {grid_path}: n_items and n_seeds must be whole numbers in every ok row")
        items, notes = checked_records(items, grid.assign(**counts), str(items_arg))
        for note in notes:
            print(f"warning: {note}", file=sys.stderr)
    for column in ("precision", "package"):  # keep the grid's own group when the records say
        if column in items.columns and column in grid.columns and len(grid):
            items = items[items[column].astype(str) == str(grid[column].iloc[0])]
    cells = set(zip(grid["model"].astype(str), grid["config_id"].astype(str), strict=True))
    if "model" in items.columns and "config_id" in items.columns:
        keys = pd.MultiIndex.from_arrays([items["model"].astype(str), items["config_id"].astype(str)])
        items = items[keys.isin(list(cells))]
    return grid, items, items_arg


def plan_from_grid(args: argparse.Namespace) -> list[dict]:
    """One object per benchmark and pair of the pilot: its discordance, K and item count, the difference
    it can detect, the items needed for --effect, and the wall time those would take."""
    from safetyrepro.analysis.paired.power import (
        check_settings,
        detectable_from_differences,
        items_needed,
        pilot_differences,
        pilot_discordance,
    )
    from safetyrepro.errors import UserError

    given = [flag for flag, v in (("--discordance", args.discordance), ("--configs", args.configs)) if v is not None]
    if given:
        raise UserError(
            f"GRID and {'/'.join(given)} exclude each other: the pilot gives the discordance and the "
            f"configuration count (drop {' and '.join(given)}, or drop GRID to plan from numbers)"
        )
    check_settings(args.effect, args.alpha, args.power)  # the same one-line refusals as the numbers form
    grid_path = Path(args.grid)
    grid, items, source = _pilot_tables(grid_path, args.items)
    pilot = pilot_discordance(items)
    if pilot.empty:
        raise UserError(f"items {source} hold no configuration that two of the grid's models both answered")
    cells = set(zip(grid["model"].astype(str), grid["config_id"].astype(str), strict=True))
    timing = seconds_per_item(grid_path.parent, cells)
    typical = pilot_differences(items)
    rows = [
        _pair_plan(
            r, args, timing, typical[(r.benchmark, r.model_a, r.model_b)], detectable_from_differences, items_needed
        )
        for r in pilot.itertuples()
    ]
    if args.certify:
        _pilot_certify(rows, items, args)
    return rows


GRID_CERTIFY_RUNS = 200  # simulated runs a pair under plan GRID --certify: medians to within a few per cent


def _pilot_certify(rows: list[dict], items, args: argparse.Namespace) -> None:
    """certify's items to the lead of --effect for each pair at its pilot discordance and K (sequential/planning.py),
    and, where the pilot holds free-form configurations beside their log-probability twins, with `--control auto`
    at the pilot's median twin correlation (grid/twins.py): columns certify_median, twin_r, twin_median."""
    import numpy as np

    from safetyrepro.analysis.paired.power import ASSUMED_DISCORDANCE
    from safetyrepro.grid.twins import closer_to, twin_correlations
    from safetyrepro.sequential.planning import controlled_items_to_decide, items_to_decide

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
            row["certify_median"], row["certify_p80"] = (_summary(found, None)[k] for k in ("median", "p80"))
            r = r_of.get((row["benchmark"], frozenset((row["model_a"], row["model_b"]))))
            if r is not None:
                row["twin_r"] = r
                helped = controlled_items_to_decide(d, args.effect, max(r, 0.0), **common)[1]
                row["twin_median"] = _summary(helped, None)["median"]
        row["note"] = "; ".join(x for x in (row["note"], *note) if x)


def _pair_plan(r, args, timing, differences, detectable_from_differences, items_needed) -> dict:
    """One pair's plan. The detectable difference is the test run on the pilot's median configuration (the exact
    sign-flip test on its seed means' lattice, or McNemar at the design discordance: issue 53); the items needed
    read the 0/1 model at the observed discordance (an upper end for seed means), or at plan's assumed
    discordance where the pilot's models never differ."""
    from safetyrepro.analysis.paired.power import ASSUMED_DISCORDANCE

    d, k, n = float(r.discordance), int(r.n_configs), int(r.n_items)
    out = {
        "benchmark": r.benchmark,
        "model_a": r.model_a,
        "model_b": r.model_b,
        "configs": k,
        "pilot_items": n,
        "discordance": d,
        "alpha": args.alpha,
        "power": args.power,
        "effect": args.effect,
        "detectable_difference": None,
        "items_needed": None,
        "seconds_per_item": None,
        "wall_s": None,
    }
    notes = []
    dd = detectable_from_differences(differences, k, args.alpha, args.power)
    out["detectable_difference"] = dd.effect
    out["detectable_basis"] = dd.basis
    notes += [dd.reason] if dd.reason else []
    if d == 0:
        notes.append(
            f"the two models never differ in the pilot: detectable and items needed read at the discordance plan "
            f"assumes, {ASSUMED_DISCORDANCE:g}"
        )
        need = items_needed(ASSUMED_DISCORDANCE, min(args.effect, ASSUMED_DISCORDANCE), k, args.alpha, args.power)
        out["items_needed"] = need.n_items
        notes += [need.reason] if need.reason else []
    else:
        if args.effect > d:
            notes.append(f"effect {args.effect:g} exceeds the discordance {d:.3f}: not possible for this pair")
        else:
            need = items_needed(d, args.effect, k, args.alpha, args.power)
            out["items_needed"] = need.n_items
            notes += [need.reason] if need.reason else []
    if r.benchmark in timing:
        rate, timed, total = timing[r.benchmark]
        out["seconds_per_item"] = rate
        out["wall_s"] = None if out["items_needed"] is None else rate * out["items_needed"]
        if timed < total:
            notes.append(f"time scaled from {timed} of {total} cells")
    else:
        notes.append("wall time unknown (no cell files beside the grid)")
    return out | {"note": "; ".join(notes)}


def grid_lines(rows: list[dict], args: argparse.Namespace) -> list[str]:
    """A plain aligned table (it pipes and greps), then one line per note."""
    head = [
        "benchmark",
        "pair",
        "K",
        "pilot items",
        "discordance",
        "detectable at pilot",
        f"items for {args.effect:g}",
        "wall time",
        *([f"certify for {args.effect:g}", "with twin (r)"] if args.certify else []),
    ]
    body = [
        [
            r["benchmark"],
            f"{r['model_a']} vs {r['model_b']}",
            str(r["configs"]),
            str(r["pilot_items"]),
            f"{r['discordance']:.3f}",
            "none" if r["detectable_difference"] is None else f"{r['detectable_difference']:.3f}",
            "n/a" if r["items_needed"] is None else f"{r['items_needed']:,}",
            "unknown" if r["wall_s"] is None else duration(r["wall_s"]),
            *(_certify_cells(r) if args.certify else []),
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = [
        f"Power {_percent(args.power)}, alpha {args.alpha:g}, Holm over each benchmark's K configurations, exact "
        f"paired sign test; wall time = the pilot's seconds per item x items needed, all models and "
        f"configurations of the benchmark."
    ]
    if args.certify:
        lines.append(
            f"certify: its population sequences' median items to claim the lead on 0/1 answers at the pilot's "
            f"discordance ({GRID_CERTIFY_RUNS} simulated runs, 'over {CERTIFY_MAX_ITEMS:,}' where half do not by "
            f"then); with twin: --control auto, the free-form configurations' log-probability twins correlated r (the "
            f"pilot's median) and scored beyond the subset."
        )
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body]]
    lines += [f"{r['benchmark']} {r['model_a']} vs {r['model_b']}: {r['note']}" for r in rows if r["note"]]
    return lines


def _certify_cells(r: dict) -> list[str]:
    def items(n):
        return f"over {CERTIFY_MAX_ITEMS:,}" if n is None else f"{n:,}"

    if r["certify_median"] is None and r["certify_p80"] is None and r["twin_r"] is None:
        return ["-", "-"]
    twin = "-" if r["twin_r"] is None else f"{items(r['twin_median'])} ({r['twin_r']:.2f})"
    return [items(r["certify_median"]), twin]


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
        f"auto{tied}): the {_points(effect)}-point lead is claimed {_when(tw['with'])} of the free-form "
        f"configuration, without the twin on the same answers {_when(tw['without'])}",
        f"- so {share}no control can take fewer than about {tw['least_share']:.2f} of them (the growth-optimal "
        "bound, the twin's law known)",
    ]
