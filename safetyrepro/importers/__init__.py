"""Importers: the runs people already have (lm-eval output folders, Inspect logs, Every Eval Ever records) as a
SafetyRepro grid, from Python (`import_lm_eval`, ...; docs/api.md has an example) or with `safetyrepro import
lm-eval|inspect|eee PATH... --out DIR` (docs/importing.md). This module imports nothing heavy: `safetyrepro --help`
loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .write import Imported


def _importer(package: str, doc: str) -> Callable[..., Imported]:
    """`import_<package>`: importers/run.py's `import_runs` for one package's runs, loaded on the call."""

    def import_(
        paths: Sequence[str],
        *,
        metric: str | None = None,
        mapping: str | None = None,
        duplicates: str = "newest",
        skip_bad: bool = False,
    ) -> Imported:
        from .run import import_runs

        return import_runs(
            package, paths, metric=metric, mapping_path=mapping, duplicates=duplicates, skip_bad=skip_bad
        )

    import_.__name__ = import_.__qualname__ = "import_" + package.replace("-", "_")
    import_.__doc__ = doc
    return import_


import_lm_eval = _importer(
    "lm-eval",
    "lm-eval output folders (or results files) as an `Imported`: grid, items, provenance, unmapped, duplicates, "
    "disagreements and bad-input tables, the rules text and run.json's record.",
)
import_inspect = _importer(
    "inspect", "Inspect log folders (or .eval/.json logs) as an `Imported` (see `import_lm_eval`)."
)
import_eee = _importer(
    "eee", "Every Eval Ever records (folders searched for <uuid>.json, or record files) as an `Imported`."
)
