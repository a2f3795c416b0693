"""`safetyrepro demo`: the embedded demo. Three small real models from PyPI, a slice of the envelope
chosen to finish in about ten minutes on two CPU cores, the grid, then the analysis report."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

DEMO_BENCHMARKS = ("toxigen", "xstest")
DEMO_TIER = "conservative_core"
DEMO_LIMIT = 24


def register(sub: argparse._SubParsersAction) -> None:
    from safetyrepro.sweep.cli import add_sweep_arguments

    p = sub.add_parser("demo", help="run the embedded demo: three small models, a slice of the envelope, the report",
                       description=__doc__)
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory (default: runs/demo)")
    add_sweep_arguments(p, require_out=False)
    p.set_defaults(func=run, models=None, benchmarks=None, tier=DEMO_TIER, limit=DEMO_LIMIT)


def run(args: argparse.Namespace) -> int:
    from safetyrepro.adapters.registry import DEFAULT_MODELS
    from safetyrepro.analysis import cli as analysis_cli
    from safetyrepro.sweep.sweeper import Sweep

    t0 = time.time()
    args.models = args.models or list(DEFAULT_MODELS)
    args.benchmarks = args.benchmarks or list(DEMO_BENCHMARKS)
    print(f"demo: {', '.join(args.models)} on {', '.join(args.benchmarks)}, tier {args.tier}, "
          f"first {args.limit} items of each fixed subset -> {args.out}", flush=True)
    sweep = Sweep.from_args(args)
    result = sweep.run()
    sweep.print_summary(result)
    analysis_dir = args.out / "analysis"
    parser = argparse.ArgumentParser()
    analysis_cli.register(parser.add_subparsers())
    analyze_args = ["analyze", str(args.out / "grid.csv"), "--out", str(analysis_dir)]
    code = analysis_cli.run(parser.parse_args(analyze_args + (["--rules", args.rules] if args.rules else [])))
    print(f"demo finished in {time.time() - t0:.0f} s: grid {args.out / 'grid.csv'}, report {analysis_dir / 'report.md'}")
    return code or (2 if result.failed else 0)
