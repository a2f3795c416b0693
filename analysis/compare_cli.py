"""`safetyrepro compare GRID_A GRID_B [GRID ...] [--out DIR]`: the same cells measured under two or
more conditions that should not matter (BF16 vs NF4, stratified item subsamples, other seeds).
Only argparse is imported at start-up."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="paired comparison of grids: per-cell deltas, top cells, ordering stability",
        description="Pair the cells of two or more grids on (model, benchmark, config_id) and report per-cell "
        "differences (|delta| for two groups, max-min range for more), the largest ones, within-envelope "
        "ranges and whether each configuration's model ordering is the same in every group. A grid that "
        "holds several (precision, package) groups is split into them.",
    )
    p.add_argument("grids", nargs="+", metavar="GRID", help="grid files (CSV or Parquet); at least two groups in all")
    p.add_argument(
        "--out", help="write compare_*.csv tables and compare_report.md here (default: print a summary only)"
    )
    p.add_argument(
        "--labels",
        nargs="+",
        metavar="LABEL",
        help="names for the groups, in input order (default: what differs between them: precision, package or file)",
    )
    p.add_argument("--rules", help="rules file to validate against (default: the packaged envelope.yaml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from safetyrepro.analysis.paired.compare import compare_grids, load_groups
    from safetyrepro.analysis.render.compare_report import summary_lines, write_comparison
    from safetyrepro.tasks.envelope import load_rules

    rules = load_rules(args.rules)
    if args.out:
        from safetyrepro.analysis.render.output import check_output_folder

        check_output_folder(Path(args.out), "compare", inputs=args.grids)
    comparison = compare_grids(load_groups(args.grids, rules, args.labels), rules)
    for w in comparison.warnings:
        sys.stderr.write(f"safetyrepro: warning: {w}\n")
    for line in summary_lines(comparison):
        print(line)
    if args.out:
        written = write_comparison(comparison, Path(args.out))
        print(f"wrote {len(written)} files to {args.out}")
    return 0
