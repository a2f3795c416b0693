"""`safetyrepro verdict A B`: is model A better than model B on these runs, with a paired test?

    safetyrepro verdict runs/lm-eval/smol runs/lm-eval/qwen            # two lm-eval output folders
    safetyrepro verdict logs/a.eval logs/b.eval --json                 # two Inspect logs
    safetyrepro verdict runs/full runs/nf4 --margin 0.02 --markdown    # any task: equivalent within 2 points?
    safetyrepro verdict smollm2 qwen2.5-coder-0.5b --grid runs/s/grid.csv   # two models of a grid with items

Runs of SafetyRepro's own tasks (or of tasks a --mapping places on its benchmarks) are imported as
`safetyrepro import` reads them, paired item by item on every configuration both have, and tested as
`analyze` tests them (analysis/paired.py). Runs of any other task (or with --by-task) are read task by task
(importers/task_scores.py), paired by item id and epoch, and tested per task x metric (analysis/two_runs.py):
the difference and its interval, the exact paired test, Holm over the comparisons, what the items could
detect and, with --margin, equivalence (TOST).

Compared by configuration, every row says what its lead rests on (`rests_on`: readable, format-driven or
uninformative, analysis/readings.py) with the cells' parse rates and, on free-form rows, the content reading
(the items both models' replies were read on); the sentence says when the claimed winner's wins or leads are
about answer format, not which model is safer, and whom the content reading names (issue 52)."""

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
        "configurations, what the items could detect, what each configuration's lead rests on (readable, "
        "format-driven: unread or empty replies, uninformative: one label; with the parse rates and, on free-form "
        "configurations, the items both models' replies were read on), and one sentence.",
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
    p.add_argument(
        "--metric",
        help="which metric of the runs is the score (as `safetyrepro import`); task by task: compare only this one "
        "(lm-eval's acc or acc,none, an Inspect scorer)",
    )
    p.add_argument("--mapping", help="mapping file for tasks that are not SafetyRepro's (docs/importing.md)")
    p.add_argument("--rules", help="with --grid: the rules file (default: rules.yaml beside the grid, else packaged)")
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="familywise error over the configurations, or the tasks x metrics (default 0.05)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--markdown", action="store_true", help="print a Markdown block to paste instead of the table")
    anyrun = p.add_argument_group("runs of any task (lm-eval with --log_samples, Inspect logs)")
    anyrun.add_argument(
        "--by-task",
        action="store_true",
        help="compare SafetyRepro's own tasks task by task too (the default for every other task)",
    )
    anyrun.add_argument("--task", action="append", default=[], help="compare only this task (repeatable)")
    anyrun.add_argument(
        "--margin",
        type=float,
        help="also test equivalence: are A and B within +-M of each other (TOST, M in the score's units)?",
    )
    way = anyrun.add_mutually_exclusive_group()
    way.add_argument(
        "--higher-is-better",
        dest="higher_is_better",
        action="store_const",
        const=True,
        help="the metric's direction where the run does not record one (Inspect logs)",
    )
    way.add_argument(
        "--lower-is-better", dest="higher_is_better", action="store_const", const=False, help="the other way round"
    )
    anyrun.add_argument(
        "--restrict",
        action="store_true",
        help="where the runs' items differ, pair only the items both hold unchanged (the counts are printed)",
    )
    anyrun.add_argument(
        "--prompts-may-differ",
        action="store_true",
        help="pair items by id even where the runs gave them different prompts (another chat template, ...)",
    )
    p.set_defaults(func=run)


def _from_runs(args):
    """(grid frame, items frame, rules, label A, label B) from two runs."""
    import pandas as pd

    from safetyrepro.importers.run import import_runs
    from safetyrepro.importers.task_scores import package_of
    from safetyrepro.tasks.envelope import parse_rules

    parts = []
    for path in (args.a, args.b):
        imported = import_runs(package_of(path), [path], metric=args.metric, mapping_path=args.mapping)
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
    from safetyrepro.analysis.grid_io import ITEM_FILES, RULES_BESIDE, beside_grid, read_table
    from safetyrepro.tasks.envelope import load_rules

    if args.a == args.b:
        raise UserError(f"A and B are the same model ({args.a!r}); verdict compares two different models")

    grid_path = Path(args.grid)
    rules_path = args.rules or beside_grid(grid_path, RULES_BESIDE)
    items_path = args.items or beside_grid(grid_path, ITEM_FILES)
    if items_path is None:
        raise UserError(f"no per-item records beside {grid_path}; pass --items ITEMS (a paired verdict needs them)")
    return read_table(grid_path), read_table(items_path, what="items"), load_rules(rules_path), (args.a, args.b)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha {args.alpha}: must be in (0, 1)")
    if args.margin is not None and not 0 < args.margin < 1:
        raise UserError(f"--margin {args.margin}: must be in (0, 1), in the score's units (0.02: two points)")
    if args.json and args.markdown:
        raise UserError("--json and --markdown: choose one output")
    if not args.grid and Path(args.a).resolve() == Path(args.b).resolve():
        raise UserError(f"A and B are the same run ({args.a}); verdict compares two different runs")
    if not args.grid and not args.mapping and (args.by_task or not _safetyrepro_tasks_only(args.a, args.b)):
        return _by_task(args)
    per_task = [
        f
        for f, given in (
            ("--margin", args.margin is not None),
            ("--task", args.task),
            ("--restrict", args.restrict),
            ("--prompts-may-differ", args.prompts_may_differ),
            ("--higher-is-better/--lower-is-better", args.higher_is_better is not None),
        )
        if given
    ]
    if per_task:
        raise UserError(
            f"{', '.join(per_task)}: for runs compared task by task; these are compared by SafetyRepro configuration "
            f"({'--grid' if args.grid else '--mapping' if args.mapping else 'SafetyRepro tasks'}): add --by-task "
            f"(two runs, no --grid or --mapping)"
        )
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
                        "rests_on_note": READINGS_NOTE,
                        "configurations": [_count(r, "n_both") for r in v.table.to_dict(orient="records")],
                    }
                ),
                indent=2,
                allow_nan=False,
            )
        )
    elif args.markdown:
        print(_markdown(v), end="")
    else:
        print(_text(v))
    return 0


READINGS_NOTE = (
    "rests_on: what each row's lead stands on: readable, format-driven (a cell with unread or empty replies, or a "
    "lead the items both models' replies were read on do not support: about answer format, not which model is "
    "safer), uninformative (a cell that answers one label); n_both, content_a, content_b, content_p: the content "
    "reading, each model's score on the items both models' replies were read on and the exact paired p-value there"
)


def _count(row: dict, key: str) -> dict:
    """A count that a column with missing values (a row without a content reading) carried as a float, whole."""
    import math

    value = row.get(key)
    return row | {key: int(value)} if isinstance(value, float) and math.isfinite(value) else row


def _rests_on_lines(table) -> list[str]:
    """One line per row whose lead is not readable: the configuration, its basis and why."""
    from safetyrepro.analysis.readings import READABLE

    return [f"  {r.config_id}: {r.rests_on}: {r.rests_on_why}" for r in table.itertuples() if r.rests_on != READABLE]


def _text(v) -> str:
    """The sentences, the table (rests_on's why below it, a line a row, as the table would be too wide)."""
    shown = v.table.drop(columns=["model_a", "model_b", "benchmark", "rests_on_why"])
    lines = [*v.sentences.values(), "", shown.to_string(index=False, float_format=lambda x: f"{x:.4g}", na_rep="-")]
    why = _rests_on_lines(v.table)
    if why:
        lines += ["", "What the leads that are not readable rest on:", *why, "", READINGS_NOTE + "."]
    return "\n".join(lines)


def _markdown(v) -> str:
    """A block to paste: the sentences, then the table with what each row's lead rests on in its own column."""
    import math

    from safetyrepro.markdown import markdown_table, md_escape

    def cell(x) -> str:
        if isinstance(x, float):
            return "-" if math.isnan(x) else f"{x:.4g}"
        return str(x)

    columns = [c for c in v.table.columns if c not in ("model_a", "model_b", "benchmark", "rests_on_why")]
    rows = []
    for r in v.table.to_dict(orient="records"):
        on = r["rests_on"] if not r["rests_on_why"] else f"{r['rests_on']}: {r['rests_on_why']}"
        rows.append([cell(r[c]) if c != "rests_on" else on for c in columns])
    out = [
        *(f"**{md_escape(s)}**\n" for s in v.sentences.values()),
        f"A = {md_escape(v.model_a)}, B = {md_escape(v.model_b)}.",
        "",
        markdown_table(columns, rows),
        "",
        f"- {md_escape(READINGS_NOTE)}.",
    ]
    return "\n".join(out) + "\n"


def _safetyrepro_tasks_only(*paths: str) -> bool:
    """Whether every task the runs hold is one of SafetyRepro's own (compared by configuration)."""
    from safetyrepro.importers.task_scores import task_names

    names = [n for p in paths for n in task_names(p)]
    return bool(names) and all(_is_safetyrepro_task(n) for n in names)


def _is_safetyrepro_task(name: str) -> bool:
    from safetyrepro.importers.mapping import INSPECT_TASK, LM_EVAL_TASK

    return LM_EVAL_TASK.fullmatch(name) is not None or INSPECT_TASK.fullmatch(name) is not None


def _by_task(args: argparse.Namespace) -> int:
    """Two runs of any task: per task x metric, paired by item id and epoch (analysis/two_runs.py)."""
    from safetyrepro.analysis.two_runs import compare
    from safetyrepro.analysis.two_runs_report import headline, markdown_report, sentences, text_report
    from safetyrepro.importers.task_scores import pair_runs, read_run
    from safetyrepro.limits import label_problem, shorten

    if args.grid:
        raise UserError("--by-task compares two runs; it takes no --grid")
    run_a, run_b = read_run(args.a), read_run(args.b)
    labels = tuple(args.labels) if args.labels else (run_a.model, run_b.model)
    for label in labels:
        problem = label_problem(label)
        if problem:
            raise UserError(f"model name {shorten(label)}: {problem}; name the runs with --labels A B")
    if labels[0] == labels[1]:
        raise UserError(f"both runs are of model {labels[0]!r}; name them with --labels A B")
    pairing = pair_runs(
        run_a,
        run_b,
        tasks=tuple(args.task),
        metrics=(args.metric,) if args.metric else (),
        restrict=args.restrict,
        prompts_may_differ=args.prompts_may_differ,
        higher_is_better=args.higher_is_better,
    )
    if not pairing.pairs:
        raise UserError(
            f"{args.a} and {args.b}: no task x metric to compare"
            + (f" ({'; '.join(pairing.notes[:3])})" if pairing.notes else "")
        )
    v = compare(pairing.pairs, labels[0], labels[1], args.alpha, args.margin)
    if args.json:
        print(
            json.dumps(
                _strict(
                    {
                        "model_a": labels[0],
                        "model_b": labels[1],
                        "run_a": args.a,
                        "run_b": args.b,
                        "alpha": args.alpha,
                        "margin": args.margin,
                        "claims": "about the models (population: items as draws from each task, epochs averaged "
                        "per item)",
                        "family_size": v.family_size,
                        "verdict": headline(v),
                        "sentences": sentences(v),
                        "comparisons": v.table.to_dict(orient="records"),
                        "pairing": list(pairing.counts),
                        "notes": list(pairing.notes),
                    }
                ),
                indent=2,
                allow_nan=False,
            )
        )
    elif args.markdown:
        print(markdown_report(v, pairing.notes), end="")
    else:
        print(text_report(v, pairing.notes))
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
