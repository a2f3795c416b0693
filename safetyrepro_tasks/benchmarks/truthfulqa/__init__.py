"""TruthfulQA MC1 (the 817-question v0 set), options shuffled per item and lettered.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items
and scoring; `README.md` gives the paper and runnable commands. The registry (`benchmarks/registry.py`)
reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.registry import task_export
from safetyrepro.tasks.benchmarks.truthfulqa.definition import SOURCE, TruthfulQA

BENCHMARK = TruthfulQA

__all__ = ["BENCHMARK", "SOURCE", "TruthfulQA", "truthfulqa"]

__getattr__ = task_export(__name__, "truthfulqa")  # the Inspect @task in tasks.py, loaded on first use
