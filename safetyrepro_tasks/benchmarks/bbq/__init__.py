"""BBQ: three-option reading comprehension over social-bias contexts, with the BBQ bias scores.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.bbq.definition import BBQ, SOURCE

BENCHMARK = BBQ

__all__ = ["BENCHMARK", "SOURCE", "BBQ", "bbq"]


def __getattr__(name: str):
    # the Inspect @task `bbq` (tasks.py), exported as inspect_evals packages export theirs, but loaded on
    # first use: importing inspect_ai takes seconds, and lm-eval and the analysis never need it
    if name == "bbq":
        from .tasks import bbq

        return bbq
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
