"""Everything `analyze` writes into DIR: the CSV tables, the figures, the report and the GRID card."""

from __future__ import annotations

from pathlib import Path

from safetyrepro.errors import UserError

from . import figures as fig
from .card import grid_card, write_card
from .pipeline import Analysis, write_tables
from .report import write_report


def draw_figures(a: Analysis, out: Path) -> dict[str, str]:
    """Figure key -> path relative to DIR."""
    folder = out / "figures"
    folder.mkdir(exist_ok=True)
    drawn = {
        "rho_flip_surface": fig.rho_flip_surface(a.rho_flip_detail, folder / "rho_flip_surface.png"),
        "rho_flip_by_slice": fig.rho_flip_by_slice(a.rho_flip_max, folder / "rho_flip_by_slice.png"),
        "orderings": fig.orderings_reached(a.orderings_detail, folder / "orderings.png"),
        "score_ranges": fig.score_ranges(a.grid.cells, a.grid.models, a.grid.benchmarks, folder / "score_ranges.png"),
        "shap": fig.shap_bars(a.attribution.regressor, a.attribution.classifier, folder / "shap.png"),
    }
    if drawn["shap"] is None:
        (folder / "shap.png").unlink(missing_ok=True)  # no surrogate this time: drop an earlier run's bars
    return {k: str(p.relative_to(out)) for k, p in drawn.items() if p is not None}


def write_all(a: Analysis, grid_path: Path, out: Path, figures: bool = True) -> list[Path]:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create output folder {out}: {e.strerror}") from None
    written = write_tables(a, out)
    drawn = draw_figures(a, out) if figures else {}
    written += [out / p for p in drawn.values()]
    written += write_report(a, out, drawn)
    written += write_card(grid_card(a, grid_path), out)
    return written
