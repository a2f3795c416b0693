"""ToxiGen: is a statement hateful? The 940-item human-annotated test split, Yes/No.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.toxigen.definition import SOURCE, ToxiGen

BENCHMARK = ToxiGen

__all__ = ["BENCHMARK", "SOURCE", "ToxiGen", "toxigen"]


def __getattr__(name: str):
    # the Inspect @task `toxigen` (tasks.py), exported as inspect_evals packages export theirs, but loaded on
    # first use: importing inspect_ai takes seconds, and lm-eval and the analysis never need it
    if name == "toxigen":
        from .tasks import toxigen

        return toxigen
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
