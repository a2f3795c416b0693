"""`safetyrepro verdict A B`: is model A better than model B on these runs, with a paired test?

    safetyrepro verdict runs/lm-eval/smol runs/lm-eval/qwen            # two lm-eval output folders
    safetyrepro verdict logs/a.eval logs/b.eval --json                 # two Inspect logs
    safetyrepro verdict runs/full runs/nf4 --margin 0.02 --markdown    # any task: equivalent within 2 points?
    safetyrepro verdict smollm2 qwen2.5-coder-0.5b --grid runs/s/grid.csv   # two models of a grid with items

Runs of SafetyRepro's own tasks (or of tasks a --mapping places on its benchmarks) are imported as
`safetyrepro import` reads them, paired item by item on every configuration both have, and tested as
`analyze` tests them (analysis/paired/paired.py). Runs of any other task (or with --by-task) are read task by task
(importers/task_scores.py), paired by item id and epoch, and tested per task x metric (analysis/paired/two_runs.py):
the difference, the exact paired test, Holm over the comparisons, an interval that inverts that test at the
row's Holm level (analysis/sign_flip.paired_interval: it excludes 0 only on a confirmed row), what the items
could detect and, with --margin, equivalence (TOST).

Compared by configuration, every row says what its lead rests on (`rests_on`: readable, format-driven or
uninformative, analysis/metrics/readings.py) with the cells' parse rates and, on free-form rows, the content reading
(the items both models' replies were read on); the sentence says when the claimed winner's wins or leads are
about answer format, not which model is safer, and whom the content reading names (issue 52).

With --expect better|not-worse|equivalent (--gate: better) the verdict is a release gate (analysis/paired/gate.py):
exit 0 pass, 1 fail, 3 inconclusive, 2 a refusal as always, and one final line "gate: ... — why". The work is
safetyrepro.verdict (verdict_api.py), which a test can call for the same result; this module parses and prints."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from safetyrepro.analysis import compare_cli
from safetyrepro.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verdict",
        help="two models' paired verdict: per configuration the difference, exact test, Holm, power",
        description="Is A better than B on these runs? Per shared configuration: the paired difference A - B over "
        "the items both answered, the exact paired sign-flip test, Holm across the configurations, an exact "
        "interval that inverts that test at the row's Holm level (it excludes 0 only on a confirmed row), what "
        "the items could detect, what each configuration's lead rests on (readable, "
        "format-driven: unread or empty replies, uninformative: one label; with the parse rates and, on free-form "
        "configurations, the items both models' replies were read on), and one sentence.",
    )
    p.add_argument(
        "a",
        metavar="A",
        help="model A's run (lm-eval output folder, Inspect log or log folder), or its label in --grid; or a grid "
        "file (two grids: the same cells measured twice, as `compare` pairs them)",
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
    gate = p.add_argument_group(
        "release gate (exit 0 pass, 1 fail, 3 inconclusive; 2 stays a refusal; docs/compare_any_runs.md, Gate)"
    )
    gate.add_argument(
        "--expect",
        choices=("better", "not-worse", "equivalent"),
        help="what A must be against B on every comparison: better; not worse by more than --margin; within "
        "+- --margin (equivalent). Exits 0 when the data confirm it (Holm, at --alpha), 1 when they confirm the "
        "opposite on any comparison, 3 when neither; ends with one line 'gate: pass|fail|inconclusive — why'",
    )
    gate.add_argument("--gate", action="store_true", help="shorthand for --expect better")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", help="with two grids: write their comparison's tables and report here (as `compare`)")
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
        help="also test equivalence: are A and B within +-M of each other (TOST, M in the score's units)? With "
        "--expect not-worse or equivalent, the gate's margin (by configuration too)",
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
        "--cluster",
        metavar="FIELD",
        help="items come in clusters named by this field of each item's lm-eval `doc` or Inspect sample metadata "
        "(a passage, a template, a conversation): the clusters, not the items, are the draws of the test, the "
        "interval and what the items could detect",
    )
    anyrun.add_argument(
        "--prompts-may-differ",
        action="store_true",
        help="pair items by id even where the runs gave them different prompts (another chat template, ...)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt as e:  # SIGTERM too (cli.Terminated): verdict writes nothing, so nothing resumes
        from safetyrepro.cli import Terminated

        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        sys.stderr.write(f"safetyrepro: {how}; verdict writes nothing, so there is nothing to resume\n")
        return 130  # cli.main answers 143 for SIGTERM, as docs/failures.md gives it


GRID_SUFFIXES = (".csv", ".parquet")


def _two_grids(args: argparse.Namespace) -> bool:
    """A and B are grid files (no --grid): the comparison `compare` makes, folded into verdict (issue 55)."""
    return args.grid is None and all(Path(x).suffix in GRID_SUFFIXES and Path(x).is_file() for x in (args.a, args.b))


def _run(args: argparse.Namespace) -> int:
    from safetyrepro.verdict_api import print_warning, verdict

    if _two_grids(args):
        runs_only = [
            f
            for f, on in (("--margin", args.margin is not None), ("--expect", args.expect), ("--gate", args.gate))
            if on
        ]
        if runs_only:
            raise UserError(f"two grids are compared cell by cell (as `compare` does): {runs_only[0]} is for runs")
        grids = argparse.Namespace(grids=[args.a, args.b], out=args.out, labels=args.labels, rules=args.rules)
        return compare_cli.run(grids)
    if args.out is not None:
        raise UserError("--out is for two grids (their comparison tables); a verdict on runs writes nothing")
    if args.json and args.markdown:
        raise UserError("--json and --markdown: choose one output")
    if args.gate and args.expect not in (None, "better"):
        raise UserError(f"--gate is --expect better; it takes no --expect {args.expect}")
    result = verdict(
        args.a,
        args.b,
        grid=args.grid,
        items=args.items,
        margin=args.margin,
        alpha=args.alpha,
        expect="better" if args.gate else args.expect,
        labels=args.labels,
        metric=args.metric,
        mapping=args.mapping,
        rules=args.rules,
        by_task=args.by_task,
        tasks=args.task,
        restrict=args.restrict,
        prompts_may_differ=args.prompts_may_differ,
        higher_is_better=args.higher_is_better,
        cluster=args.cluster,
        warn=print_warning,
    )
    if result.by == "task":
        _print_by_task(args, result)
    else:
        _print_by_configuration(args, result)
    return result.exit_code


def _gate_json(r) -> dict | None:
    """The gate as --json carries it (None without --expect)."""
    if r.expect is None:
        return None
    return {
        "expect": r.expect,
        "margin": r.margin,
        "outcome": r.gate,
        "exit_code": r.exit_code,
        "line": r.gate_line,
        "comparisons": [
            {"comparison": name, "outcome": row.gate, "p_pass_holm": row.gate_p_pass, "p_fail_holm": row.gate_p_fail}
            for name, row in zip(r.comparisons, r.rows.itertuples(), strict=True)
        ],
    }


def _gate_lines(r) -> list[str]:
    """Each comparison's gate outcome, then the gate's one final line ('' without --expect)."""
    if r.expect is None:
        return []
    margin = f" --margin {r.margin:g}" if r.margin is not None and r.expect != "better" else ""
    lines = [
        "",
        f"Gate (--expect {r.expect}{margin}): each comparison, with its Holm-adjusted p-values for the expectation "
        "and for its opposite:",
    ]
    for name, row in zip(r.comparisons, r.rows.itertuples(), strict=True):
        lines.append(f"  {name}: {row.gate} (p = {_p(row.gate_p_pass)}; opposite p = {_p(row.gate_p_fail)})")
    return [*lines, "", r.gate_line]


def _p(x: float) -> str:
    return f"{x:.2g}" if x < 0.001 else f"{x:.3f}"


def _end(args, r, body: str) -> None:
    """The report, then the gate; under --json the report is one JSON object, so the gate's line goes to stderr."""
    if args.json:
        print(body)
        if r.gate_line:
            print(r.gate_line, file=sys.stderr)
    elif args.markdown:
        print(body, end="")
        if r.gate_line:
            print("\n".join(f"- {x.strip()}" if x.startswith("  ") else x for x in _gate_lines(r)))
    else:
        print("\n".join([body, *_gate_lines(r)]))


def _print_by_configuration(args, r) -> None:
    from safetyrepro.analysis.paired.paired import interval_note

    v = r.detail
    if args.json:
        body = _json_body(
            r,
            {
                "model_a": r.model_a,
                "model_b": r.model_b,
                "alpha": r.alpha,
                "sentences": v.sentences,
                "family_size": v.family_size,
                "missing_configurations": v.missing,
                "detectable_difference": v.detectable,
                "rests_on_note": readings_note(),
                "interval_note": interval_note(r.alpha),
                "configurations": [_count(row, "n_both") for row in v.table.to_dict(orient="records")],
            },
        )
    elif args.markdown:
        body = _markdown(v)
    else:
        body = _text(v)
    _end(args, r, body)


def readings_note() -> str:
    """analysis/readings' words for what a claim rests on, and the content reading's columns this table adds
    (imported here: the analysis loads pandas, which the CLI's start-up does not need)."""
    from safetyrepro.analysis.metrics.readings import READINGS_NOTE

    return (
        f"{READINGS_NOTE}; n_both, content_a, content_b, content_p: the content reading, each model's score on the "
        "items both models' replies were read on and the exact paired p-value there"
    )


HIDDEN = ("model_a", "model_b", "benchmark", "rests_on_why", "ci_method")  # said elsewhere, or too wide for a row


def _count(row: dict, key: str) -> dict:
    """A count that a column with missing values (a row without a content reading) carried as a float, whole."""
    import math

    value = row.get(key)
    return row | {key: int(value)} if isinstance(value, float) and math.isfinite(value) else row


def _rests_on_lines(table) -> list[str]:
    """One line per row whose lead is not readable: the configuration, its basis and why."""
    from safetyrepro.analysis.metrics.readings import READABLE

    return [f"  {r.config_id}: {r.rests_on}: {r.rests_on_why}" for r in table.itertuples() if r.rests_on != READABLE]


def _text(v) -> str:
    """The sentences, the table (rests_on's why below it, a line a row, as the table would be too wide)."""
    from safetyrepro.analysis.paired.paired import interval_note

    shown = v.table.drop(columns=list(HIDDEN))
    lines = [*v.sentences.values(), "", shown.to_string(index=False, float_format=lambda x: f"{x:.4g}", na_rep="-")]
    lines += ["", interval_note(v.alpha) + "."]
    why = _rests_on_lines(v.table)
    if why:
        lines += ["", "What the leads that are not readable rest on:", *why, "", readings_note() + "."]
    return "\n".join(lines)


def _markdown(v) -> str:
    """A block to paste: the sentences, then the table with what each row's lead rests on in its own column."""
    import math

    from safetyrepro.markdown import markdown_table, md_escape

    def cell(x) -> str:
        if isinstance(x, float):
            return "-" if math.isnan(x) else f"{x:.4g}"
        return str(x)

    from safetyrepro.analysis.paired.paired import interval_note

    columns = [c for c in v.table.columns if c not in HIDDEN]
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
        f"- {md_escape(readings_note())}.",
        f"- {md_escape(interval_note(v.alpha))}.",
    ]
    return "\n".join(out) + "\n"


def _print_by_task(args, r) -> None:
    from safetyrepro.analysis.render.two_runs_report import markdown_report, text_report

    v = r.detail
    if args.json:
        body = _json_body(
            r,
            {
                "model_a": r.model_a,
                "model_b": r.model_b,
                "run_a": args.a,
                "run_b": args.b,
                "alpha": r.alpha,
                "margin": r.margin,
                "claims": "about the models (population: items as draws from each task, epochs averaged per item)",
                "family_size": v.family_size,
                "verdict": r.sentence,
                "sentences": list(r.sentences),
                "comparisons": v.table.to_dict(orient="records"),
                "pairing": list(r.pairing.counts),
                "notes": list(r.notes),
            },
        )
    elif args.markdown:
        body = markdown_report(v, r.notes)
    else:
        body = text_report(v, r.notes)
    _end(args, r, body)


def _json_body(r, fields: dict) -> str:
    """The --json object: `fields`, and the gate's outcome where --expect asked for one; strict JSON values."""
    return json.dumps(_strict(fields | ({"gate": _gate_json(r)} if r.expect else {})), indent=2, allow_nan=False)


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
