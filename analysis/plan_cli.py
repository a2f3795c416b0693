"""`safetyrepro plan`: how many items per configuration a paired verdict needs, and what a pilot grid
can detect (analysis/paired/power.py has the model). Only argparse (and the stdlib-only timing reader) is imported
at start-up."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from safetyrepro.analysis.plan_words import percent, points
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
        verb = "is" if len(given) == 1 else "are"
        raise UserError(
            f"plan GRID --certify reads the discordance and the twins' correlation off the pilot ({', '.join(given)} "
            f"{verb} the numbers form's), e.g. safetyrepro plan --certify --discordance 0.3 --configs 48 --effect "
            f"0.15 --twin 0.8"
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

    # lazy: numpy, scipy and the sequences load only once plan runs (the CLI's start-up stays light)
    from safetyrepro.analysis.plan_certify import certify_lines, closeness_lines, plan_certify, plan_closeness

    _refuse_unused(args)
    if args.effect is None:  # None until here: --ideal refuses a given one
        args.effect = DEFAULT_EFFECT
    if args.grid:
        rows = plan_from_grid(args)
        print(json.dumps(rows, indent=2) if args.json else "\n".join(grid_lines(rows, args)))
    elif args.ideal is not None:
        r = plan_closeness(args, _item_count(args.items))
        print(json.dumps(r, indent=2) if args.json else "\n".join(closeness_lines(r)))
    else:
        alike = _within_only(args)
        numbers = within_only(args) if alike else plan_from_numbers(args)
        if args.certify:
            numbers["certify"] = plan_certify(args, _item_count(args.items))
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


def _prob(p: float) -> str:
    """0.423, but 0.00072 rather than 0.001: a small power is still a number, not a rounding."""
    return f"{p:.3f}" if p == 0 or p >= 0.01 else f"{p:.2g}"


def _two(x: float) -> str:
    """0.3 as 0.30, but 0.125 as 0.125: never hide a digit the user gave."""
    return f"{x:.2f}" if round(x, 2) == x else f"{x:.3g}"


def number_lines(r: dict) -> list[str]:
    setting = (
        f"To find a {points(r['effect'])}-point paired difference at {percent(r['power'])} power with "
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
            f"the smallest difference found at {percent(r['power'])} power is {dd:.3f} ({points(dd)} points)"
            if dd is not None
            else r["detectable_difference_note"]
        )
        lines.append(
            f"At {r['items']:,} items per configuration: power {_prob(r['power_at_items'])} for a "
            f"{points(r['effect'])}-point difference ({_prob(r['power_at_items_two_sided'])} counting a claim "
            f"in either direction); {found}."
        )
    return lines


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
        from safetyrepro.analysis.plan_certify import pilot_certify  # lazy: as run()'s

        pilot_certify(rows, items, args)
    return rows


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
    if args.certify:
        from safetyrepro.analysis.plan_certify import certify_cells, certify_note  # lazy: as run()'s
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
            *(certify_cells(r) if args.certify else []),
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = [
        f"Power {percent(args.power)}, alpha {args.alpha:g}, Holm over each benchmark's K configurations, exact "
        f"paired sign test; wall time = the pilot's seconds per item x items needed, all models and "
        f"configurations of the benchmark."
    ]
    if args.certify:
        lines.append(certify_note())
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [head, *body]]
    lines += [f"{r['benchmark']} {r['model_a']} vs {r['model_b']}: {r['note']}" for r in rows if r["note"]]
    return lines
