"""`safetyrepro verdict A B`: is model A better than model B on these runs, with a paired test?

    safetyrepro verdict runs/lm-eval/smol runs/lm-eval/qwen            # two lm-eval output folders
    safetyrepro verdict logs/a.eval logs/b.eval --json                 # two Inspect logs
    safetyrepro verdict smollm2 qwen2.5-coder-0.5b --grid runs/s/grid.csv   # two models of a grid with items

The runs are imported as `safetyrepro import` reads them (the same rules: nothing guessed, mapping files
for other tasks), paired item by item on every configuration both have, and tested as `analyze` tests
them (analysis/paired.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safetyrepro.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verdict",
        help="two models' paired verdict: per configuration the difference, exact test, Holm, power",
        description="Is A better than B on these runs? Per shared configuration: the paired difference A - B over "
        "the items both answered, a 95 % interval, the exact paired sign-flip test, Holm across the "
        "configurations, what the items could detect, and one sentence.",
    )
    p.add_argument(
        "a",
        metavar="A",
        help="model A's run (lm-eval output folder, Inspect log or log folder), or its label in --grid",
    )
    p.add_argument("b", metavar="B", help="model B's run, or its label in --grid")
    p.add_argument("--grid", help="A and B are model labels of this grid (items from --items or beside it)")
    p.add_argument("--items", help="with --grid: per-item records (default: items.parquet beside the grid)")
    p.add_argument("--labels", nargs=2, metavar=("LABEL_A", "LABEL_B"), help="name the two runs' models")
    p.add_argument("--metric", help="which metric of the runs is the score (as `safetyrepro import`)")
    p.add_argument("--mapping", help="mapping file for tasks that are not SafetyRepro's (docs/importing.md)")
    p.add_argument("--rules", help="with --grid: the rules file (default: rules.yaml beside the grid, else packaged)")
    p.add_argument("--alpha", type=float, default=0.05, help="familywise error over the configurations (default 0.05)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.set_defaults(func=run)


def _package(path: str) -> str:
    """inspect for .eval/.json logs or folders holding .eval files; lm-eval otherwise."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"run {path} does not exist")
    if p.is_file():
        return "inspect" if p.suffix in (".eval", ".json") and not p.name.startswith("results") else "lm-eval"
    return "inspect" if next(p.rglob("*.eval"), None) is not None else "lm-eval"


def _from_runs(args):
    """(grid frame, items frame, rules, label A, label B) from two runs."""
    import pandas as pd

    from safetyrepro.importers.run import import_runs
    from safetyrepro.tasks.envelope import parse_rules

    if Path(args.a).resolve() == Path(args.b).resolve():
        raise UserError(f"A and B are the same run ({args.a}); verdict compares two different runs")
    parts = []
    for path in (args.a, args.b):
        imported = import_runs(_package(path), [path], metric=args.metric, mapping_path=args.mapping)
        models = sorted(imported.grid["model"].unique()) if len(imported.grid) else []
        if len(models) != 1:
            raise UserError(
                f"run {path} holds {len(models)} models ({', '.join(models) or 'none'}); verdict compares "
                f"one model's run with another's"
            )
        if imported.items.empty:
            raise UserError(
                f"run {path} has no per-item records (lm-eval: --log_samples; Inspect logs keep them); "
                f"a paired verdict needs them"
            )
        parts.append((imported, models[0]))
    labels = tuple(args.labels) if args.labels else (parts[0][1], parts[1][1])
    if labels[0] == labels[1]:
        raise UserError(f"both runs are of model {labels[0]!r}; name them with --labels A B")
    grids, items = [], []
    for (imported, old), new in zip(parts, labels, strict=True):
        grids.append(imported.grid.assign(model=imported.grid["model"].replace({old: new})))
        items.append(imported.items.assign(model=imported.items["model"].replace({old: new})))
    texts = {imported.rules_text for imported, _ in parts}
    if len(texts) > 1:
        raise UserError(
            "the two runs need different rules files (their settings widen the envelope differently); "
            "import them together with `safetyrepro import` and use verdict --grid"
        )
    rules = parse_rules(texts.pop(), "the imported runs' rules")
    return pd.concat(grids, ignore_index=True), pd.concat(items, ignore_index=True), rules, labels


def _from_grid(args):
    from safetyrepro.analysis.grid_io import read_table
    from safetyrepro.tasks.envelope import load_rules

    if args.a == args.b:
        raise UserError(f"A and B are the same model ({args.a!r}); verdict compares two different models")

    grid_path = Path(args.grid)
    rules_path = args.rules or (
        grid_path.parent / "rules.yaml" if (grid_path.parent / "rules.yaml").is_file() else None
    )
    items_path = args.items or next(
        (str(p) for p in (grid_path.parent / "items.parquet", grid_path.parent / "items.csv") if p.is_file()), None
    )
    if items_path is None:
        raise UserError(f"no per-item records beside {grid_path}; pass --items ITEMS (a paired verdict needs them)")
    return read_table(grid_path), read_table(items_path, what="items"), load_rules(rules_path), (args.a, args.b)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be in (0, 1)")
    from safetyrepro.analysis.grid_io import common_configurations, select_group, validate_cells
    from safetyrepro.analysis.paired import paired_verdict
    from safetyrepro.analysis.significance import items_from_frame
    from safetyrepro.grid_schema import OK, STATUS

    frame, items_frame, rules, (a, b) = _from_grid(args) if args.grid else _from_runs(args)
    source = args.grid or "the two runs"
    frame = select_group(validate_cells(frame, rules, source), source)
    held = sorted(frame["model"].astype(str).unique())
    for label in (a, b):
        if label not in held:
            raise UserError(f"model {label!r} is not in {source}; it holds {', '.join(held)}")
    # only A and B decide which configurations are shared: a third model of the grid takes none away
    frame = frame[frame["model"].astype(str).isin((a, b))]
    if "model" in items_frame.columns:  # a file without it is refused, naming the column, by items_from_frame
        items_frame = items_frame[items_frame["model"].astype(str).isin((a, b))]
    ok = frame if STATUS not in frame.columns else frame[frame[STATUS].fillna(OK).astype(str) == OK]
    declared = {str(bm): list(dict.fromkeys(g["config_id"].astype(str))) for bm, g in ok.groupby("benchmark")}
    grid = common_configurations(frame, source, rules, min_configs=1)  # one configuration is a verdict too
    items = items_from_frame(items_frame, grid, source)
    for w in (*grid.warnings, *items.warnings):
        print(f"safetyrepro: warning: {w}", file=sys.stderr)
    if not items.by_config:
        raise UserError(f"{source}: no configuration has item records for both {a} and {b}")
    v = paired_verdict(items, grid, a, b, args.alpha, declared)
    if args.json:
        print(
            json.dumps(
                _strict(
                    {
                        "model_a": a,
                        "model_b": b,
                        "alpha": args.alpha,
                        "sentences": v.sentences,
                        "family_size": v.family_size,
                        "missing_configurations": v.missing,
                        "detectable_difference": v.detectable,
                        "configurations": v.table.to_dict(orient="records"),
                    }
                ),
                indent=2,
                allow_nan=False,
            )
        )
        return 0
    for sentence in v.sentences.values():
        print(sentence)
    shown = v.table.drop(columns=["model_a", "model_b", "benchmark"])
    print()
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 0


def _strict(value):
    """Strict JSON values: an undefined number (NaN, an infinity) is null, numpy scalars plain Python."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
