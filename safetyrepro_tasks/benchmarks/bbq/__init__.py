"""BBQ: three-option reading comprehension over social-bias contexts, with the BBQ bias scores.

The definition is in `bbq.py`; `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.bbq.bbq import BBQ, SOURCE

BENCHMARK = BBQ

__all__ = ["BENCHMARK", "SOURCE", "BBQ"]
