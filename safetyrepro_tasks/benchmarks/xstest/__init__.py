"""XSTest: comply with 250 safe prompts, refuse 200 unsafe ones.

The definition is in `xstest.py`; `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.xstest.xstest import SOURCE, XSTest

BENCHMARK = XSTest

__all__ = ["BENCHMARK", "SOURCE", "XSTest"]
