"""`safetyrepro analyze GRID --out DIR`: every table, figure, the report and the GRID card.
Only argparse is imported at start-up; the analysis modules load when the command runs."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="rho_flip, orderings and the paper's metrics from a grid: tables, figures, report, GRID card",
        description="Read a grid (one row per model x benchmark x configuration) and write CSV tables, PNG figures, "
        "report.md/.html and grid_card.md/.json into DIR. A grid that mixes precisions or packages must "
        "be narrowed with --precision/--package (or compared with `safetyrepro compare`). The grid and "
        "item-record formats are described in docs/formats.md.",
    )
    p.add_argument(
        "grid",
        help="grid.csv or grid.parquet in the grid format of docs/formats.md (one row per cell; "
        "optional status and tie_rate columns)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="output folder (created; an earlier analysis there is replaced as a "
        "whole, a folder holding other files is refused)",
    )
    p.add_argument(
        "--items",
        help="per-item records (Parquet or CSV: model, config_id, item_id, seed, item_score; "
        "raw_output optional, see docs/formats.md) for the significance tests, the item bootstrap and "
        "empty-output checks; default: items.parquet or items.csv beside the grid, if present",
    )
    p.add_argument(
        "--slices",
        nargs="+",
        metavar="SLICE",
        help="slices to compute (default: all of full, core, "
        "excl_t4, excl_diverse, free_form, logprob, parse_clean, conservative_core)",
    )
    p.add_argument(
        "--theta",
        nargs="+",
        type=float,
        metavar="T",
        help="CFR pass thresholds (default 0.5 0.6 0.7 0.8); the per-cell median is always added",
    )
    p.add_argument("--precision", help="analyse only this precision group of the grid")
    p.add_argument("--package", help="analyse only this package group of the grid")
    p.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="resamples for every bootstrap (configurations, items for rho_flip, ANOVA rho); default 1000",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for the bootstraps and the surrogate models (default 0)")
    p.add_argument(
        "--rules",
        help="rules file to validate against (default: rules.yaml beside the grid if there is "
        "one, as `safetyrepro import` writes it, else the packaged envelope.yaml)",
    )
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.set_defaults(func=run)


def analyze_grid(
    grid_path: Path,
    out: Path,
    rules_path: str | None = None,
    *,
    slices: list[str] | None = None,
    thetas: list[float] | None = None,
    precision: str | None = None,
    package: str | None = None,
    bootstrap: int = 1000,
    seed: int = 0,
    items: str | None = None,
    figures: bool = True,
):
    """Validate the grid, run every analysis and write DIR; returns (Analysis, written paths).
    Item records beside the grid are used when `items` is not given (and only warn if unusable)."""
    from safetyrepro.analysis.metrics.slices import check_slices
    from safetyrepro.analysis.render.output import check_output_folder, write_all
    from safetyrepro.errors import UserError
    from safetyrepro.grid.grid_io import ITEM_FILES, RULES_BESIDE, beside_grid, load_grid
    from safetyrepro.limits import MAX_ANALYSIS_SEED, MAX_BOOTSTRAP
    from safetyrepro.tasks.envelope import load_rules

    from .pipeline import AnalysisOptions, parse_thetas, run_analysis

    if rules_path is None:
        rules_path = beside_grid(grid_path, RULES_BESIDE)
        if rules_path:
            sys.stderr.write(f"safetyrepro: note: validating against the rules file beside the grid, {rules_path}\n")
    unfinished = unfinished_sweep(grid_path)  # a sweep's folder without its grid yet: say how to finish it
    if unfinished:
        raise UserError(unfinished)
    rules = load_rules(rules_path)
    if not 1 <= bootstrap <= MAX_BOOTSTRAP:
        raise UserError(
            f"--bootstrap {bootstrap}: expected a whole number of resamples from 1 to {MAX_BOOTSTRAP} "
            "(the cap MAX_BOOTSTRAP)"
        )
    if not 0 <= seed <= MAX_ANALYSIS_SEED:
        raise UserError(f"--seed {seed}: expected a whole number from 0 to {MAX_ANALYSIS_SEED}")
    chosen_slices, chosen_thetas = check_slices(slices, rules), parse_thetas(thetas)
    grid = load_grid(grid_path, rules, precision=precision, package=package)
    check_output_folder(out, inputs=(grid_path, items))  # before the work; the grid's own errors come first
    required = True
    if items is None:  # records found beside the grid only warn when they are unusable
        items = beside_grid(grid_path, ITEM_FILES)
        required = items is None
    options = AnalysisOptions(
        slices=chosen_slices,
        thetas=chosen_thetas,
        n_resamples=bootstrap,
        seed=seed,
        items_path=items,
        items_required=required,
    )
    analysis = run_analysis(grid, rules, options)
    for w in analysis.warnings:
        sys.stderr.write(f"safetyrepro: warning: {w}\n")
    return analysis, write_all(analysis, grid_path, out, figures=figures)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    analysis, written = analyze_grid(
        Path(args.grid),
        Path(args.out),
        args.rules,
        slices=args.slices,
        thetas=args.theta,
        precision=args.precision,
        package=args.package,
        bootstrap=args.bootstrap,
        seed=args.seed,
        items=args.items,
        figures=not args.no_figures,
    )
    from safetyrepro.grid.direction import direction

    head = analysis.rho_flip_max[analysis.rho_flip_max["slice"] == "full"]
    for r in head.itertuples():
        better = direction(r.benchmark)
        line = (
            f"{r.benchmark:<12} |C|={r.n_configs:<3} rho_flip max {r.rho_flip_max:.3f} ({r.pairs}); "
            f"ceiling {r.ceiling:.3f}, chance {r.chance_max:.3f}"
        )
        if not better.monotone:  # the verdicts read in the better direction, as the report's headline gives them
            line += f"; {better.label}: rho_flip max {r.rho_flip_max_better:.3f} ({r.pairs_better})"
        print(line.replace("(none (no pair reverses))", "(no pair reverses)"))
    print(
        f"wrote {len(written)} files to {args.out} in {time.perf_counter() - started:.1f} s "
        f"(open {Path(args.out) / 'report.html'}; Markdown: report.md)"
    )
    return 0


# -- a sweep that has not finished: its folder holds sweep.json and cell files, no grid.csv yet -----------------
# sweep.json's filters -> the sweep's flags (safetyrepro/sweep/options.AXIS_FLAGS the other way round; the analysis
# reads a sweep's folder but imports nothing of the sweep's: tests/test_architecture_doc.py)
_FILTER_FLAGS = {
    "template": "--templates",
    "decoding": "--decodings",
    "shots": "--shots",
    "scoring": "--scoring",
    "config": "--configs",
}


def unfinished_sweep(grid_path: str | Path) -> str | None:
    """The one line for a grid path (the grid file, or the folder given for it) inside a sweep folder
    that holds no grid.csv yet; None when that is not the case (the caller's own message stands)."""
    path = Path(grid_path)
    if path.is_file():
        return None
    folder = path if path.is_dir() else path.parent
    record = folder / "sweep.json"
    if not record.is_file() or (folder / "grid.csv").exists():
        return None
    cells = folder / "cells"
    done = sum(1 for _ in cells.glob("*/*.json")) if cells.is_dir() and not cells.is_symlink() else 0
    state = f"{done} cell file{'s' if done != 1 else ''} written" if done else "no cell finished yet"
    identity = _identity(record)
    command = sweep_command(identity, folder)
    how = (
        f"rerun its command, which resumes from the finished cells: {command}"
        if command
        else f"rerun the sweep's own command with --out {shlex.quote(str(folder))} (it resumes from the finished cells)"
    )
    if command and identity and identity.get("rules_sha256") != _default_rules_sha256():
        how += " --rules <the rules file it was made under>"
    return (
        f"{folder} holds a sweep that has not finished ({state}), so there is no grid.csv to read yet; "
        f"to finish it, {how} ({record} records its settings)"
    )


def _identity(record: Path) -> dict | None:
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sweep_command(identity: dict | None, out: Path) -> str | None:
    """`safetyrepro sweep ...` that has the identity `identity` (a sweep.json), or None where sweep.json
    cannot say it (damaged, or models labelled by a models file: their specs differ from their labels)."""
    if not identity:
        return None
    try:
        models, specs = list(identity["models"]), list(identity.get("model_specs") or identity["models"])
        if not models or models != specs:
            return None
        argv = ["safetyrepro", "sweep", "--models", *models, "--benchmarks", *identity["benchmarks"]]
        defaults = {"tier": "full", "package": "lm-eval", "precision": "bf16", "tie_rule": "expected"}
        for key, default in defaults.items():
            if identity.get(key, default) != default:
                argv += [f"--{key.replace('_', '-')}", str(identity[key])]
        for key, flag in (("limit", "--limit"), ("subsample", "--subsample"), ("subset_seed", "--subset-seed")):
            if identity.get(key) is not None:
                argv += [flag, str(identity[key])]
        for axis, values in (identity.get("filters") or {}).items():
            if values:
                argv += [_FILTER_FLAGS[axis], *map(str, values)]
        argv += ["--out", str(out)]
    except (KeyError, TypeError):
        return None
    return shlex.join(argv)


def _default_rules_sha256() -> str | None:
    from safetyrepro.tasks.envelope import default_rules  # lazy: the rules load only when the message is made

    return default_rules().sha256
