"""Everything `analyze` writes into DIR: the CSV tables, the figures, the report and the GRID card."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from safetyrepro.atomic import ensure_dir, refuse_links_under, remove_within
from safetyrepro.errors import UserError

from . import figures as fig
from .card import grid_card, write_card
from .figures import FigureSet
from .pipeline import Analysis, write_tables
from .report import write_report


def draw_figures(a: Analysis, out: Path) -> FigureSet:
    """Every figure that carries information, drawn into DIR/figures; the others named with a reason."""
    folder = ensure_dir(out / "figures", root=out)
    full = a.rho_flip_detail[a.rho_flip_detail["slice"] == "full"]
    plans = {  # key -> (file, reason not to draw or None, how to draw)
        "rho_flip_surface": ("rho_flip_surface.png", fig.constant_reason(
            np.r_[full["rho_flip"], full["rho_flip_better"]], "rho_flip on slice full (every pair and benchmark)"),
            lambda p, root: fig.rho_flip_surface(a.rho_flip_detail, p, root)),
        "rho_flip_by_slice": ("rho_flip_by_slice.png", fig.constant_reason(
            a.rho_flip_max["rho_flip_max"], "rho_flip max (every benchmark and slice)"),
            lambda p, root: fig.rho_flip_by_slice(a.rho_flip_max, p, root)),
        "orderings": ("orderings.png", fig.constant_reason(
            a.orderings_detail["n_orderings"], "The number of orderings reached (every benchmark and slice)"),
            lambda p, root: fig.orderings_reached(a.orderings_detail, p, root)),
        "score_ranges": ("score_ranges.png", fig.constant_reason(a.grid.cells["score"], "The score (every cell)"),
                         lambda p, root: fig.score_ranges(a.grid.cells, a.grid.models, a.grid.benchmarks, p, root)),
        "shap": ("shap.png", None if not (a.attribution.regressor.empty and a.attribution.classifier.empty) else
                 "no surrogate model could be fitted (see Notes).",
                 lambda p, root: fig.shap_bars(a.attribution.regressor, a.attribution.classifier, p, root)),
    }
    paths, skipped = {}, {}
    for key, (name, reason, draw) in plans.items():
        path = folder / name
        if reason is None and draw(path, out) is not None:
            paths[key] = str(path.relative_to(out))
        else:
            remove_within(path, out)  # a figure from an earlier run must not pass for this one's
            skipped[key] = reason or "nothing to draw."
    return FigureSet(paths, skipped)


def write_all(a: Analysis, grid_path: Path, out: Path, figures: bool = True) -> list[Path]:
    make_output_folder(out)
    written = write_tables(a, out)
    drawn = draw_figures(a, out) if figures else FigureSet()
    written += [out / p for p in drawn.paths.values()]
    written += write_report(a, out, drawn)
    written += write_card(grid_card(a, grid_path), out)
    return written


def check_output_folder(out: Path) -> None:
    """Read-only, before any work: the folder can be written without following a link."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    refuse_links_under(out)


def make_output_folder(out: Path) -> Path:
    """The analysis folder, created if missing; a file in the way, or a link anywhere in it, is refused
    before anything is written."""
    try:
        refuse_links_under(out)
        return ensure_dir(out)
    except UserError:
        raise
    except OSError as e:
        raise UserError(f"cannot create output folder {out}: {e.strerror}") from None
