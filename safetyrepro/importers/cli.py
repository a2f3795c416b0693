"""`safetyrepro import lm-eval PATH... --out DIR` and `safetyrepro import inspect LOGDIR... --out DIR`:
runs people already have, as a grid `safetyrepro analyze` reads (docs/importing.md). Only argparse
and common.py are imported at start-up; the importers load when the command runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import DUPLICATES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "import",
        help="lm-eval output folders or Inspect logs you already have, as a grid for `analyze`",
        description="Read existing runs (any task; SafetyRepro's own are recognised by name, others through "
        "--mapping) and write them as a grid in the documented format, with per-item records, the "
        "rules file the grid is valid under, and a provenance table. Then: safetyrepro analyze "
        "DIR/grid.csv --out DIR/analysis.",
    )
    # argparse gives the subparsers the parent's parser class
    sub = p.add_subparsers(dest="package", metavar="PACKAGE", required=True)
    # per package: help, description, the paths' metavar and help
    packages = {
        "lm-eval": (
            "lm-eval --output_path folders (results_*.json, samples_*.jsonl)",
            "Read lm-eval output folders (searched at any depth) or results files.",
            "PATH",
            "folders written by lm_eval --output_path, or results_<date>.json files",
        ),
        "inspect": (
            "Inspect logs (.eval / .json) through Inspect's log API",
            "Read Inspect log folders (searched at any depth) or log files.",
            "LOGDIR",
            "Inspect log folders (--log-dir) or log files",
        ),
        "eee": (
            "Every Eval Ever records (<uuid>.json + <uuid>_samples.jsonl; docs/eee.md)",
            "Read Every Eval Ever 0.3 records (folders searched at any depth for <uuid>.json, "
            "or record files) and their instance-level files: SafetyRepro's own exports, "
            "or any converter's (HELM, lm-eval, Inspect) through --mapping.",
            "PATH",
            "folders of EEE records (e.g. an export's DIR or DIR/data) or record files",
        ),
    }
    for name, (short, description, metavar, paths_help) in packages.items():
        one = sub.add_parser(name, help=short, description=description)
        one.add_argument("paths", nargs="+", metavar=metavar, help=paths_help)
        one.add_argument(
            "--out",
            required=True,
            type=Path,
            help="output folder: grid.csv/.parquet, items.parquet, rules.yaml, run.json, provenance.csv, unmapped.csv, "
            "duplicates.csv, disagreements.csv, bad_inputs.csv (an earlier import's files there are replaced)",
        )
        one.add_argument(
            "--metric",
            help="the metric to import for every task (default: each task's primary metric, "
            "the first it reports; SafetyRepro's tasks: acc / accuracy)",
        )
        one.add_argument(
            "--mapping",
            dest="mapping_path",
            metavar="FILE.yaml",
            help="task regex -> benchmark and template (and model labels) "
            "for tasks that are not SafetyRepro's own (docs/importing.md)",
        )
        one.add_argument(
            "--duplicates",
            choices=DUPLICATES,
            default="newest",
            help="several runs of one cell and seed: keep the newest (default), keep all as repetitions of "
            "the cell (score = their mean), or refuse",
        )
        one.add_argument(
            "--skip-bad",
            "--skip_bad",
            dest="skip_bad",
            action="store_true",
            help="import what can be read and list the bad files (default: stop at the first, exit 2)",
        )
        one.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .run import import_runs
    from .write import check_out, write_outputs

    out = Path(args.out)
    check_out(out)
    options = {k: getattr(args, k) for k in ("metric", "mapping_path", "duplicates", "skip_bad")}
    imported = import_runs(args.package, args.paths, **options)
    for w in imported.warnings:
        sys.stderr.write(f"safetyrepro: warning: {w}\n")
    written = write_outputs(out, imported)
    g = imported.grid
    record = imported.run_record["import"]
    print(
        f"imported {record['runs_used']} of {record['runs_read']} task runs into {len(g)} cells: "
        f"{g['model'].nunique()} models, {g['benchmark'].nunique()} benchmark(s), "
        f"{g['config_id'].nunique()} configurations; "
        f"{f'{len(imported.items)} item records' if len(imported.items) else 'no item records (no items.parquet)'}; "
        f"{record['unmapped']} unmapped, {record['bad_inputs']} bad input(s)"
    )
    for r in g.itertuples():
        print(
            f"  {r.model:<24} {r.config_id:<48} {r.package:<12} score {r.score:.4f}  n_items {r.n_items}  "
            f"seeds {r.n_seeds}"
        )
    print(
        f"wrote {len(written)} files to {out}; analyse with: safetyrepro analyze {out / 'grid.csv'} "
        f"--out {out / 'analysis'}"
    )
    return 0
