"""BBQ: three-option reading comprehension over social-bias contexts, with the BBQ bias scores.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items
and scoring; `README.md` gives the paper and runnable commands. The registry (`benchmarks/registry.py`)
reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.bbq.definition import BBQ, SOURCE
from safetyrepro.tasks.benchmarks.registry import task_export

BENCHMARK = BBQ

__all__ = ["BENCHMARK", "SOURCE", "BBQ", "bbq"]

__getattr__ = task_export(__name__, "bbq")  # the Inspect @task in tasks.py, loaded on first use
