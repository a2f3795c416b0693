"""TruthfulQA MC1 (the 817-question v0 set), options shuffled per item and lettered.

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.truthfulqa.definition import SOURCE, TruthfulQA

BENCHMARK = TruthfulQA

__all__ = ["BENCHMARK", "SOURCE", "TruthfulQA", "truthfulqa"]


def __getattr__(name: str):
    # the Inspect @task `truthfulqa` (tasks.py), exported as inspect_evals packages export theirs, but loaded on
    # first use: importing inspect_ai takes seconds, and lm-eval and the analysis never need it
    if name == "truthfulqa":
        from .tasks import truthfulqa

        return truthfulqa
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
