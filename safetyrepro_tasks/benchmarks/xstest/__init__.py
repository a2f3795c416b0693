"""XSTest: comply with 250 safe prompts, refuse 200 unsafe ones.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.xstest.definition import SOURCE, XSTest

BENCHMARK = XSTest

__all__ = ["BENCHMARK", "SOURCE", "XSTest", "xstest"]


def __getattr__(name: str):
    # the Inspect @task `xstest` (tasks.py), exported as inspect_evals packages export theirs, but loaded on
    # first use: importing inspect_ai takes seconds, and lm-eval and the analysis never need it
    if name == "xstest":
        from .tasks import xstest

        return xstest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
