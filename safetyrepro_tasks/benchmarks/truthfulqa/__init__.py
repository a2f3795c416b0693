"""TruthfulQA MC1 (the 817-question v0 set), options shuffled per item and lettered.

The definition is in `truthfulqa.py`; `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.truthfulqa.truthfulqa import SOURCE, TruthfulQA

BENCHMARK = TruthfulQA

__all__ = ["BENCHMARK", "SOURCE", "TruthfulQA"]
