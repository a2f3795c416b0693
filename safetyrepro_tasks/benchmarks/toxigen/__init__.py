"""ToxiGen: is a statement hateful? The 940-item human-annotated test split, Yes/No.

The definition is in `toxigen.py`; `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.toxigen.toxigen import SOURCE, ToxiGen

BENCHMARK = ToxiGen

__all__ = ["BENCHMARK", "SOURCE", "ToxiGen"]
