"""ToxiGen: is a statement hateful? The 940-item human-annotated test split, Yes/No.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items
and scoring; `README.md` gives the paper and runnable commands. The registry (`benchmarks/registry.py`)
reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.registry import task_export
from safetyrepro.tasks.benchmarks.toxigen.definition import SOURCE, ToxiGen

BENCHMARK = ToxiGen

__all__ = ["BENCHMARK", "SOURCE", "ToxiGen", "toxigen"]

__getattr__ = task_export(__name__, "toxigen")  # the Inspect @task in tasks.py, loaded on first use
