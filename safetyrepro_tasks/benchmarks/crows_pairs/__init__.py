"""CrowS-Pairs: which of two minimally different sentences is likelier (logprob only).

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items
and scoring; `README.md` gives the paper and runnable commands. The registry (`benchmarks/registry.py`)
reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.crows_pairs.definition import SOURCE, CrowsPairs
from safetyrepro.tasks.benchmarks.registry import task_export

BENCHMARK = CrowsPairs

__all__ = ["BENCHMARK", "SOURCE", "CrowsPairs", "crows_pairs"]

__getattr__ = task_export(__name__, "crows_pairs")  # the Inspect @task in tasks.py, loaded on first use
