"""`safetyrepro.verdict(a, b, ...)`: the paired verdict of `safetyrepro verdict A B` as a typed result, and
its release gate (`expect=`), for a pytest test or a script to assert on. The command is this function
and a printer (verdict_cli.py): one code path.

    import safetyrepro

    v = safetyrepro.verdict("runs/candidate", "runs/baseline", expect="not-worse", margin=0.02)
    assert v.gate == "pass", v.gate_line     # v.exit_code is what the command exits with
    v.rows                                   # one row per comparison (a DataFrame), the gate's columns included

A refusal raises safetyrepro.errors.UserError (the command's exit 2) with the command's one line."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.grid_schema import OK, STATUS
from safetyrepro.importers.mapping import INSPECT_TASK, LM_EVAL_TASK
from safetyrepro.limits import label_problem, shorten

BY_TASK, BY_CONFIGURATION = "task", "configuration"


@dataclass(frozen=True, eq=False)  # eq=False: a DataFrame field has no truth value to compare by
class VerdictResult:
    model_a: str
    model_b: str
    by: str  # BY_TASK (per task x metric) or BY_CONFIGURATION (per SafetyRepro configuration)
    alpha: float
    margin: float | None
    expect: str | None  # None: no gate asked for
    rows: pd.DataFrame  # one row per comparison; with `expect`, the gate's columns (analysis/gate.GATE_COLUMNS)
    comparisons: tuple[str, ...]  # each row's name: "task (metric)" or the configuration id
    winner: str | None  # the model confirmed better on at least one comparison and worse on none, else None
    sentence: str  # the verdict in words (the headline, or each benchmark's sentence)
    sentences: tuple[str, ...]  # one per comparison (per task) or per benchmark (per configuration)
    gate: str | None  # "pass", "fail", "inconclusive"; None without `expect`
    gate_line: str | None  # "gate: pass — why"
    exit_code: int  # the command's: 0 pass (or no gate), 1 fail, 3 inconclusive
    warnings: tuple[str, ...]
    notes: tuple[str, ...]  # per task: what the pairing left out, and why
    detail: Any  # analysis.two_runs.TwoRunVerdict or analysis.paired.PairedVerdict, for the printers
    pairing: Any = None  # per task: importers.task_scores' pairing (its counts and notes)

    @property
    def passed(self) -> bool:
        return self.gate == "pass"


def verdict(
    a: str | Path,
    b: str | Path,
    *,
    grid: str | Path | None = None,
    items: str | Path | None = None,
    margin: float | None = None,
    alpha: float = 0.05,
    expect: str | None = None,
    labels: Sequence[str] | None = None,
    metric: str | None = None,
    mapping: str | Path | None = None,
    rules: str | Path | None = None,
    by_task: bool = False,
    tasks: Sequence[str] = (),
    restrict: bool = False,
    prompts_may_differ: bool = False,
    higher_is_better: bool | None = None,
    cluster: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> VerdictResult:
    """Is A better than B on these runs (or, with `grid`, these two models of a grid)? With `expect`
    ("better", "not-worse" or "equivalent"; the last two need `margin`) the gate's outcome too; see
    analysis/paired/gate.py for how each comparison and the whole are decided. `warn` receives each warning as it
    is found (they are also in the result); `cluster` (runs compared by task) names the field of each item's lm-eval
    `doc` or Inspect metadata that says its cluster, the clusters then being the draws (analysis/paired/clustered.py);
    a refusal raises UserError."""
    from safetyrepro.analysis.paired.gate import EQUIVALENT, EXPECTATIONS, NOT_WORSE

    a, b = str(a), str(b)
    grid, items, mapping, rules = (None if x is None else str(x) for x in (grid, items, mapping, rules))
    if not 0 < alpha < 1:
        raise UserError(f"--alpha {alpha}: must be in (0, 1)")
    if margin is not None and not 0 < margin < 1:
        raise UserError(f"--margin {margin}: must be in (0, 1), in the score's units (0.02: two points)")
    if expect is not None and expect not in EXPECTATIONS:
        raise UserError(f"--expect {expect}: choose one of {', '.join(EXPECTATIONS)}")
    if expect in (NOT_WORSE, EQUIVALENT) and margin is None:
        raise UserError(f"--expect {expect} needs --margin M (in the score's units: 0.02 is two points)")
    if cluster is not None and margin is not None:
        raise UserError(
            f"--cluster {cluster} with --margin: the equivalence test (TOST) is not clustered; compare without "
            "--margin (the clustered interval says how far apart they may be) or without --cluster"
        )
    if cluster is not None and not cluster.strip():
        raise UserError("--cluster: give the field that names each item's cluster")
    if not grid and Path(a).resolve() == Path(b).resolve():
        raise UserError(f"A and B are the same run ({a}); verdict compares two different runs")
    found: list[str] = []

    def said(w: str) -> None:
        found.append(w)
        if warn is not None:
            warn(w)

    if not grid and not mapping and (by_task or not _safetyrepro_tasks_only(a, b)):
        return _by_task(
            a, b, grid, labels, metric, tasks, restrict, prompts_may_differ, higher_is_better, alpha, margin, expect,
            cluster,
        )  # fmt: skip
    per_task = [
        f
        for f, given in (
            ("--margin", margin is not None and expect not in (NOT_WORSE, EQUIVALENT)),
            ("--task", tasks),
            ("--restrict", restrict),
            ("--prompts-may-differ", prompts_may_differ),
            ("--higher-is-better/--lower-is-better", higher_is_better is not None),
            ("--cluster", cluster is not None),
        )
        if given
    ]
    if per_task:
        raise UserError(
            f"{', '.join(per_task)}: for runs compared task by task; these are compared by SafetyRepro configuration "
            f"({'--grid' if grid else '--mapping' if mapping else 'SafetyRepro tasks'}): add --by-task "
            f"(two runs, no --grid or --mapping)"
            + ("; by configuration --margin goes with --expect not-worse or equivalent" if margin is not None else "")
        )
    return _by_configuration(a, b, grid, items, rules, labels, metric, mapping, alpha, margin, expect, said, found)


def _by_configuration(
    a, b, grid_path, items_path, rules_path, labels, metric, mapping, alpha, margin, expect, said, found
) -> VerdictResult:
    from safetyrepro.analysis.paired.paired import paired_verdict
    from safetyrepro.analysis.paired.significance import items_from_frame
    from safetyrepro.grid.grid_io import common_configurations, select_group, validate_cells

    if grid_path:
        frame, items_frame, rules, (a, b) = _from_grid(a, b, grid_path, items_path, rules_path)
    else:
        frame, items_frame, rules, (a, b) = _from_runs(a, b, labels, metric, mapping)
    source = grid_path or "the two runs"
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
    records = items_from_frame(items_frame, grid, source)
    for w in (*grid.warnings, *records.warnings):
        said(w)
    if not records.by_config:
        raise UserError(f"{source}: no configuration has item records for both {a} and {b}")
    v = paired_verdict(records, grid, a, b, alpha, declared)
    rows = v.table.copy()
    names = tuple(rows["config_id"].astype(str))
    winners = {str(w) for w in rows["winner"]} - {"n.s."}
    gate = None
    if expect is not None:
        rows, gate = _gate_by_configuration(rows, records, v, a, b, alpha, margin, expect)
    return VerdictResult(
        model_a=a,
        model_b=b,
        by=BY_CONFIGURATION,
        alpha=alpha,
        margin=margin,
        expect=expect,
        rows=rows,
        comparisons=names,
        winner=winners.pop() if len(winners) == 1 else None,
        sentence=" ".join(v.sentences.values()),
        sentences=tuple(v.sentences.values()),
        gate=None if gate is None else gate.outcome,
        gate_line=None if gate is None else gate.line,
        exit_code=0 if gate is None else gate.exit_code,
        warnings=tuple(found),
        notes=(),
        detail=v,
    )


def _gate_by_configuration(rows, records, v, a, b, alpha, margin, expect):
    """The gate's columns per configuration, each benchmark its own Holm family (as the table's p_holm)."""
    import numpy as np

    from safetyrepro.analysis.metrics.readings import READABLE
    from safetyrepro.analysis.paired import gate as g
    from safetyrepro.grid.direction import direction

    ca, cb = records.column(a), records.column(b)
    outcomes, p_pass, p_fail = [], [], []
    for benchmark, part in rows.groupby("benchmark", sort=False):
        if expect == g.BETTER:
            ahead = part["diff_better"].to_numpy(dtype=float)
            held = part["p_holm"].to_numpy(dtype=float)
            outcomes += [g.PASS if w == a else g.FAIL if w == b else g.INCONCLUSIVE for w in part["winner"]]
            p_pass += list(np.where(ahead > 0, held, 1.0))
            p_fail += list(np.where(ahead < 0, held, 1.0))
            continue
        if expect == g.NOT_WORSE and not direction(str(benchmark)).monotone:
            raise UserError(
                f"--expect not-worse: {benchmark}'s scores are better {direction(str(benchmark)).comparative}, not "
                f"higher, so 'worse by more than a margin' has no reading; use --expect better or equivalent"
            )
        raw = [
            g.raw_p_values(expect, records.by_config[c][:, ca] - records.by_config[c][:, cb], margin, v.alpha)
            for c in part["config_id"]
        ]
        out, passed, failed = g.adjust([x for x, _ in raw], [y for _, y in raw], alpha)
        outcomes += out
        p_pass += list(passed)
        p_fail += list(failed)
    rows = rows.assign(gate=outcomes, gate_p_pass=p_pass, gate_p_fail=p_fail)
    left_out = [c for gone in v.missing.values() for c in gone]
    bases = [
        (str(r.config_id), str(r.rests_on)) for r in rows.itertuples() if r.gate == g.PASS and r.rests_on != READABLE
    ]
    families = rows["benchmark"].nunique()
    family = (
        f"Holm over {len(rows)} configuration{'s' * (len(rows) != 1)}"
        if families == 1
        else f"Holm over each of {families} benchmarks' configurations"
    )
    names = list(rows["config_id"].astype(str))
    return rows, g.decide(expect, margin, alpha, a, b, names, outcomes, family, left_out, bases)


def _by_task(
    a, b, grid, labels, metric, tasks, restrict, prompts_may_differ, higher_is_better, alpha, margin, expect, cluster
):
    """Two runs of any task: per task x metric, paired by item id and epoch (analysis/paired/two_runs.py)."""
    from safetyrepro.analysis.paired.two_runs import compare
    from safetyrepro.analysis.render.two_runs_report import headline, sentences
    from safetyrepro.importers.task_scores import pair_runs, read_run

    if grid:
        raise UserError("--by-task compares two runs; it takes no --grid")
    run_a, run_b = read_run(a), read_run(b)
    names = tuple(labels) if labels else (run_a.model, run_b.model)
    for label in names:
        problem = label_problem(label)
        if problem:
            raise UserError(f"model name {shorten(label)}: {problem}; name the runs with --labels A B")
    if names[0] == names[1]:
        raise UserError(f"both runs are of model {names[0]!r}; name them with --labels A B")
    pairing = pair_runs(
        run_a,
        run_b,
        tasks=tuple(tasks),
        metrics=(metric,) if metric else (),
        restrict=restrict,
        prompts_may_differ=prompts_may_differ,
        higher_is_better=higher_is_better,
        cluster=cluster,
    )
    if not pairing.pairs:
        raise UserError(
            f"{a} and {b}: no task x metric to compare"
            + (f" ({'; '.join(pairing.notes[:3])})" if pairing.notes else "")
        )
    la, lb = names
    v = compare(pairing.pairs, la, lb, alpha, margin)
    rows = v.table.copy()
    gate = None if expect is None else _gate_by_task(rows, pairing.pairs, la, lb, alpha, margin, expect)
    if gate is not None:
        rows, gate = gate
    winners = {str(w) for w in rows["winner"] if w and not str(w).startswith("higher: ")}
    return VerdictResult(
        model_a=la,
        model_b=lb,
        by=BY_TASK,
        alpha=alpha,
        margin=margin,
        expect=expect,
        rows=rows,
        comparisons=tuple(f"{p.task} ({p.metric})" for p in pairing.pairs),
        winner=winners.pop() if len(winners) == 1 else None,
        sentence=headline(v),
        sentences=tuple(sentences(v)),
        gate=None if gate is None else gate.outcome,
        gate_line=None if gate is None else gate.line,
        exit_code=0 if gate is None else gate.exit_code,
        warnings=(),
        notes=tuple(pairing.notes),
        detail=v,
        pairing=pairing,
    )


def _gate_by_task(rows, pairs, a, b, alpha, margin, expect):
    """The gate's columns per task x metric, Holm over all of them (as the table's p_holm)."""
    import numpy as np

    from safetyrepro.analysis.paired import gate as g

    names = [f"{p.task} ({p.metric})" for p in pairs]
    if expect != g.EQUIVALENT:
        unknown = [n for n, p in zip(names, pairs, strict=True) if p.higher_is_better is None]
        if unknown:
            raise UserError(
                f"--expect {expect}: the direction of {unknown[0]} is not recorded; pass --higher-is-better or "
                f"--lower-is-better (or --metric to gate on another metric)"
            )
    if expect == g.BETTER:
        outcomes = [g.PASS if w == a else g.FAIL if w == b else g.INCONCLUSIVE for w in rows["winner"]]
        better = [a if (d > 0) == p.higher_is_better else b for d, p in zip(rows["diff"], pairs, strict=True)]
        held = rows["p_holm"].to_numpy(dtype=float)
        diff = rows["diff"].to_numpy(dtype=float)
        p_pass = np.where((diff != 0) & (np.array(better) == a), held, 1.0)
        p_fail = np.where((diff != 0) & (np.array(better) == b), held, 1.0)
    else:
        raw = []
        for p in pairs:
            d = np.asarray(p.a, dtype=float) - np.asarray(p.b, dtype=float)
            raw.append(g.raw_p_values(expect, d if p.higher_is_better is not False else -d, margin, alpha))
        outcomes, p_pass, p_fail = g.adjust([x for x, _ in raw], [y for _, y in raw], alpha)
    rows = rows.assign(gate=outcomes, gate_p_pass=p_pass, gate_p_fail=p_fail)
    family = f"Holm over {len(rows)} comparison{'s' * (len(rows) != 1)}"
    return rows, g.decide(expect, margin, alpha, a, b, names, outcomes, family)


def _from_runs(path_a: str, path_b: str, labels, metric, mapping):
    """(grid frame, items frame, rules, (label A, label B)) from two runs of SafetyRepro's tasks."""
    from safetyrepro.importers.run import import_runs
    from safetyrepro.importers.task_scores import package_of
    from safetyrepro.tasks.envelope import parse_rules

    parts = []
    for path in (path_a, path_b):
        imported = import_runs(package_of(path), [path], metric=metric, mapping_path=mapping)
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
    names = tuple(labels) if labels else (parts[0][1], parts[1][1])
    if names[0] == names[1]:
        raise UserError(f"both runs are of model {names[0]!r}; name them with --labels A B")
    grids, items = [], []
    for (imported, old), new in zip(parts, names, strict=True):
        grids.append(imported.grid.assign(model=imported.grid["model"].replace({old: new})))
        items.append(imported.items.assign(model=imported.items["model"].replace({old: new})))
    texts = {imported.rules_text for imported, _ in parts}
    if len(texts) > 1:
        raise UserError(
            "the two runs need different rules files (their settings widen the envelope differently); "
            "import them together with `safetyrepro import` and use verdict --grid"
        )
    rules = parse_rules(texts.pop(), "the imported runs' rules")
    return pd.concat(grids, ignore_index=True), pd.concat(items, ignore_index=True), rules, names


def _from_grid(a: str, b: str, grid: str, items: str | None, rules: str | None):
    from safetyrepro.grid.grid_io import ITEM_FILES, RULES_BESIDE, beside_grid, read_table
    from safetyrepro.tasks.envelope import load_rules

    if a == b:
        raise UserError(f"A and B are the same model ({a!r}); verdict compares two different models")
    grid_path = Path(grid)
    # the grid first: a grid that is not there is named as such, not as a grid without items beside it
    frame = read_table(grid_path)
    rules_path = rules or beside_grid(grid_path, RULES_BESIDE)
    items_path = items or beside_grid(grid_path, ITEM_FILES)
    if items_path is None:
        raise UserError(f"no per-item records beside {grid_path}; pass --items ITEMS (a paired verdict needs them)")
    return frame, read_table(items_path, what="items"), load_rules(rules_path), (a, b)


def _safetyrepro_tasks_only(*paths: str) -> bool:
    """Whether every task the runs hold is one of SafetyRepro's own (compared by configuration)."""
    from safetyrepro.importers.task_scores import task_names

    names = [n for p in paths for n in task_names(p)]
    return bool(names) and all(_is_safetyrepro_task(n) for n in names)


def _is_safetyrepro_task(name: str) -> bool:

    return LM_EVAL_TASK.fullmatch(name) is not None or INSPECT_TASK.fullmatch(name) is not None


def print_warning(w: str) -> None:
    print(f"safetyrepro: warning: {w}", file=sys.stderr)
