"""XSTest: comply with 250 safe prompts, refuse 200 unsafe ones.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items
and scoring; `README.md` gives the paper and runnable commands. The registry (`benchmarks/registry.py`)
reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.registry import task_export
from safetyrepro.tasks.benchmarks.xstest.definition import SOURCE, XSTest

BENCHMARK = XSTest

__all__ = ["BENCHMARK", "SOURCE", "XSTest", "xstest"]

__getattr__ = task_export(__name__, "xstest")  # the Inspect @task in tasks.py, loaded on first use
