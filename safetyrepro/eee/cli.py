"""`safetyrepro export eee GRID [--items ITEMS] --out DIR`: a grid as Every Eval Ever records (docs/eee.md).
Only argparse and the format's names are imported at start-up. (`safetyrepro import eee` is registered with
the other importers, safetyrepro/importers/cli.py.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from safetyrepro.importers.eee_format import RELATIONSHIPS, VERDICTS_FILE


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="a grid as records of another format (eee: Every Eval Ever)",
        description="Write a grid in another project's format. eee: one Every Eval Ever 0.3.0 record per cell, "
        "the item records as EEE instance-level JSONL, the verdict tables beside them.",
    )
    sub = p.add_subparsers(dest="format", metavar="FORMAT", required=True)
    e = sub.add_parser(
        "eee",
        help="Every Eval Ever 0.3.0 records (DIR/data/<benchmark>/<developer>/<model>/<uuid>.json)",
        description="One EEE aggregate record per grid cell (model x configuration), its items as "
        "<uuid>_samples.jsonl, in EEE's datastore layout under DIR/data/; rho_flip.csv's rows and "
        "rho_flip_max in DIR/safetyrepro_verdicts.json5 (docs/eee.md).",
    )
    e.add_argument("grid", help="grid.csv or grid.parquet (docs/formats.md)")
    e.add_argument(
        "--out", required=True, type=Path, help="output folder (new, empty, or an earlier export, which is replaced)"
    )
    e.add_argument("--items", help="per-item records (default: items.parquet or items.csv beside the grid)")
    e.add_argument(
        "--rules",
        help="rules file the grid is valid under (default: rules.yaml beside the grid, "
        "else the packaged envelope.yaml)",
    )
    e.add_argument(
        "--run-json", help="run.json with package versions, tie rule and weights (default: beside the grid, if there)"
    )
    e.add_argument(
        "--model-id",
        action="append",
        metavar="LABEL=ORG/NAME",
        help="model_info.id for a model label (default: the label when it is ORG/NAME, else "
        "safetyrepro/LABEL); repeatable",
    )
    e.add_argument(
        "--organization",
        default="SafetyRepro",
        help="source_metadata.source_organization_name (who ran the evaluation; default SafetyRepro)",
    )
    e.add_argument(
        "--relationship",
        default="third_party",
        choices=RELATIONSHIPS,
        help="source_metadata.evaluator_relationship (default third_party)",
    )
    e.add_argument("--timestamp", help="retrieved_timestamp, Unix seconds (default: $SOURCE_DATE_EPOCH, else now)")
    e.add_argument(
        "--validate",
        action="store_true",
        help="then run EEE's own validator on what was written (needs .venv-eee: make eee)",
    )
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .export import export_eee, parse_model_ids

    options = {k: getattr(args, k) for k in ("items", "rules", "run_json", "organization", "relationship", "timestamp")}
    export, written = export_eee(args.grid, args.out, model_ids=parse_model_ids(args.model_id), **options)
    for w in export.warnings:
        sys.stderr.write(f"safetyrepro: warning: {w}\n")
    samples = sum(1 for r in export.records if r["samples"])
    print(
        f"exported {len(export.records)} cells as EEE records ({samples} with instance-level samples); "
        f"{len(export.skipped)} cells not exported (status not ok)"
    )
    print(f"wrote {len(written)} files to {args.out} (verdict tables: {Path(args.out) / VERDICTS_FILE})")
    if args.validate:
        from .venv import validate

        report = validate(Path(args.out))
        print(report.summary())
        return 0 if report.ok else 1
    return 0
