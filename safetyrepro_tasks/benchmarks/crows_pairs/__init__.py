"""CrowS-Pairs: which of two minimally different sentences is likelier (logprob only).

The definition is in `definition.py` (the Inspect task in `tasks.py`); `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.crows_pairs.definition import SOURCE, CrowsPairs

BENCHMARK = CrowsPairs

__all__ = ["BENCHMARK", "SOURCE", "CrowsPairs", "crows_pairs"]


def __getattr__(name: str):
    # the Inspect @task `crows_pairs` (tasks.py), exported as inspect_evals packages export theirs, but loaded on
    # first use: importing inspect_ai takes seconds, and lm-eval and the analysis never need it
    if name == "crows_pairs":
        from .tasks import crows_pairs

        return crows_pairs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
