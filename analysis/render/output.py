"""Everything `analyze` writes into DIR: the CSV tables, the figures, the report and the GRID card,
built whole in a staging folder beside DIR and swapped in at once (safetyrepro/atomic.py,
`staged_output`): DIR holds the earlier analysis or the new one, never a mix."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.analysis.pipeline import Analysis, write_tables
from safetyrepro.analysis.render.card import VERDICT_COLUMNS, grid_card, write_card
from safetyrepro.analysis.render.figures import FigureSet
from safetyrepro.analysis.render.report import write_report
from safetyrepro.atomic import atomic_write, check_output_set, ensure_dir, staged_output
from safetyrepro.errors import UserError

from . import figures as fig


def draw_figures(a: Analysis, out: Path) -> FigureSet:
    """Every figure that carries information, drawn into DIR/figures; the others named with a reason."""
    folder = ensure_dir(out / "figures", root=out)
    full = a.rho_flip_detail[a.rho_flip_detail["slice"] == "full"]
    plans = {  # key -> (file, reason not to draw or None, how to draw)
        "wins_by_axes": (
            "wins_by_axes.png",
            None,
            lambda p, root: fig.wins_by_axes(a.grid, a.rules, a.rho_flip_detail, p, root),
        ),
        "rho_flip_surface": (
            "rho_flip_surface.png",
            fig.constant_reason(
                np.r_[full["rho_flip"], full["rho_flip_better"]], "rho_flip on slice full (every pair and benchmark)"
            ),
            lambda p, root: fig.rho_flip_surface(a.rho_flip_detail, p, root),
        ),
        "rho_flip_by_slice": (
            "rho_flip_by_slice.png",
            fig.constant_reason(a.rho_flip_max["rho_flip_max"], "rho_flip max (every benchmark and slice)"),
            lambda p, root: fig.rho_flip_by_slice(a.rho_flip_max, p, root),
        ),
        "orderings": (
            "orderings.png",
            fig.constant_reason(
                a.orderings_detail["n_orderings"], "The number of orderings reached (every benchmark and slice)"
            ),
            lambda p, root: fig.orderings_reached(a.orderings_detail, p, root),
        ),
        "score_ranges": (
            "score_ranges.png",
            fig.constant_reason(a.grid.cells["score"], "The score (every cell)"),
            lambda p, root: fig.score_ranges(a.grid.cells, a.grid.models, a.grid.benchmarks, p, root),
        ),
        "shap": (
            "shap.png",
            None
            if not (a.attribution.regressor.empty and a.attribution.classifier.empty)
            else "no surrogate model could be fitted (see Notes).",
            lambda p, root: fig.shap_bars(a.attribution.regressor, a.attribution.classifier, p, root),
        ),
    }
    paths, skipped = {}, {}
    for key, (name, reason, draw) in plans.items():
        path = folder / name
        if reason is None and draw(path, out) is not None:
            paths[key] = str(path.relative_to(out))
        else:
            skipped[key] = reason or "nothing to draw."
    return FigureSet(paths, skipped)


# what `analyze` wrote before its folders carried a marker (.safetyrepro-output.json): recognised by a
# GRID card of SafetyRepro's, and then these names only are its own
LEGACY_FILES = frozenset(
    {
        "rho_flip.csv",
        "rho_flip_detail.csv",
        "rho_flip_max.csv",
        "orderings.csv",
        "orderings_detail.csv",
        "config_orderings.csv",
        "concordance.csv",
        "tier_ablation.csv",
        "sdi.csv",
        "cfr.csv",
        "anova.csv",
        "variance_shares.csv",
        "shap_regressor.csv",
        "shap_pair_classifier.csv",
        "bootstrap.csv",
        "verdict_certificate.csv",
        "item_tests.csv",
        "significant_flips.csv",
        "degenerate_cells.csv",
        "degenerate_effects.csv",
        "excluded_cells.csv",
        "tie_rates.csv",
        "detectable.csv",
        "report.md",
        "report.html",
        "grid_card.json",
        "grid_card.md",
    }
)
LEGACY_COMPARE = re.compile(r"^compare_[a-z_]+\.(csv|md)$")


def legacy_analysis(folder: Path, files: list[str]) -> set[str] | None:
    try:
        card = json.loads((folder / "grid_card.json").read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(card, dict) and "grid" in card and "analysis_packages" in card):
        return None
    return {
        f for f in files if f in LEGACY_FILES or (f.startswith("figures/") and f.endswith(".png") and f.count("/") == 1)
    }


def legacy_comparison(folder: Path, files: list[str]) -> set[str] | None:
    if "compare_report.md" not in files:
        return None
    return {f for f in files if LEGACY_COMPARE.match(f)}


LEGACY = {"analyze": legacy_analysis, "compare": legacy_comparison}


def write_all(
    a: Analysis, grid_path: Path, out: Path, figures: bool = True, grid_text: str | None = None
) -> list[Path]:
    """Every file of the analysis, into a staging folder that then takes DIR's place (returns the
    paths under DIR). `grid_text`: the analysed grid, written as DIR/grid.csv and named by the card."""
    if grid_text is None:
        refuse_inputs_inside(out, (grid_path,))
    with staged_output(out, "analyze", legacy=legacy_analysis) as stage:
        written = []
        if grid_text is not None:
            written.append(atomic_write(stage / "grid.csv", grid_text, root=stage))
            grid_path = stage / "grid.csv"
        written += write_tables(a, stage)
        drawn = draw_figures(a, stage) if figures else FigureSet()
        written += [stage / p for p in drawn.paths.values()]
        written += write_report(a, stage, drawn)
        card = grid_card(a, grid_path)
        if grid_text is not None:
            card["grid"]["path"] = str(out / "grid.csv")
        written += write_card(card, stage)
        # the report's verdict table as a table of its own: who leads each pair, and what it rests on
        verdict = pd.DataFrame(card["verdict"]["pairs"], columns=list(VERDICT_COLUMNS))
        written.append(atomic_write(stage / "verdict_table.csv", verdict.to_csv(index=False), root=stage))
    return [out / p.relative_to(stage) for p in written]


def check_output_folder(out: Path, command: str = "analyze", inputs=()) -> None:
    """Read-only, before any work: the folder is missing, empty or an earlier output of `command`
    (its files are replaced as a whole), holds no link, and none of `inputs` is inside it."""
    check_output_set(out, command, legacy=LEGACY.get(command))
    refuse_inputs_inside(out, inputs)


def refuse_inputs_inside(out: Path, inputs) -> None:
    """The output folder is replaced as a whole: a file it reads must not be in it."""
    where = Path(os.path.realpath(out))
    for p in inputs:
        if p is not None and Path(os.path.realpath(p)).is_relative_to(where):
            raise UserError(
                f"{p} is inside --out {out}, which is replaced as a whole by the new output: "
                f"choose another --out (e.g. {Path(out) / 'analysis'})"
            )
