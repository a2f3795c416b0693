"""What `compare` prints and writes: the paired tables as CSV and a short Markdown report."""

from __future__ import annotations

from pathlib import Path

from safetyrepro.analysis.paired.compare import Comparison
from safetyrepro.analysis.render.output import legacy_comparison
from safetyrepro.analysis.render.report import Bullets, Heading, Para, Table, to_markdown
from safetyrepro.atomic import atomic_write, staged_output


def summary_lines(c: Comparison) -> list[str]:
    s = c.summary.iloc[0]
    what = "|delta|" if len(c.labels) == 2 else "range across groups"
    lines = [
        f"groups: {' | '.join(c.labels)}",
        f"{int(s['n_cells'])} paired cells; per-cell {what}: median {100 * s['median']:.2f} pp, "
        f"mean {100 * s['mean']:.2f} pp, max {100 * s['max']:.2f} pp; "
        f"{int(s['n_over_5pp'])} over 5 pp, {int(s['n_over_10pp'])} over 10 pp",
    ]
    if not c.orderings.empty:
        n, same = len(c.orderings), int(c.orderings["invariant"].sum())
        lines.append(
            f"model ordering identical in every group on {same} of {n} configurations ({100 * same / n:.1f} %)"
        )
    return lines


def _blocks(c: Comparison) -> list:
    two = len(c.labels) == 2
    spread = "|delta| (second group minus first, in absolute value)" if two else "range (max - min across groups)"
    blocks = [
        Heading("SafetyRepro paired comparison", 1),
        Para(
            f"Groups: {', '.join(c.labels)}. Cells are paired on model, benchmark and configuration; every "
            "number below is a difference between measurements of the same cell."
        ),
        Table(
            c.summary,
            f"statistics of the per-cell {spread} in score units (0.01 = 1 pp); n_over_5pp and "
            "n_over_10pp count cells that moved more than 5 and 10 points.",
        ),
        Table(
            c.by_model,
            "the same statistics per model: a model whose cells move more is more sensitive to "
            "what differs between the groups.",
        ),
        Table(
            c.top_cells.drop(columns=["decoding", "shots"], errors="ignore"),
            f"the {len(c.top_cells)} cells that moved most, with each group's score.",
        ),
    ]
    if not c.orderings.empty:
        blocks += [
            Table(
                c.ordering_summary,
                "per benchmark, template and scoring path: how many configurations keep "
                'exactly the same model ordering in every group (ties kept as ties: "a = b").',
            ),
            Table(
                c.orderings,
                "the ordering in each group per configuration; max_pair_flips counts model pairs "
                "placed in opposite order between the two most different groups.",
            ),
        ]
    if not c.rho_flip.empty:
        blocks.append(
            Table(
                c.rho_flip,
                "rho_flip of every model pair within each group, on the configurations that "
                "are paired across groups (by raw score; n_plus counts configurations where model_a is "
                "strictly higher): if a group's value differs, what differs between the groups moves "
                "the pairwise verdicts, not only the scores. ceiling is floor(|C|/2)/|C|, chance what "
                "coin-flip verdicts would average.",
            )
        )
    blocks.append(
        Table(
            c.ranges,
            "within-envelope score range (max - min over the paired configurations) of each "
            "model and benchmark in each group: does the spread that configurations cause persist?",
        )
    )
    if c.warnings:
        blocks += [Heading("Warnings"), Bullets(c.warnings)]
    return blocks


def write_comparison(c: Comparison, out: Path) -> list[Path]:
    tables = {
        "compare_cells.csv": c.cells,
        "compare_summary.csv": c.summary,
        "compare_by_model.csv": c.by_model,
        "compare_top_cells.csv": c.top_cells,
        "compare_orderings.csv": c.orderings,
        "compare_ordering_summary.csv": c.ordering_summary,
        "compare_ranges.csv": c.ranges,
        "compare_rho_flip.csv": c.rho_flip,
    }
    written = []
    with staged_output(out, "compare", legacy=legacy_comparison) as stage:  # whole or untouched
        for name, table in tables.items():
            if table.empty:
                continue
            atomic_write(stage / name, table.to_csv(index=False), root=stage)
            written.append(out / name)
        atomic_write(stage / "compare_report.md", to_markdown(_blocks(c)), root=stage)
    return [*written, out / "compare_report.md"]
