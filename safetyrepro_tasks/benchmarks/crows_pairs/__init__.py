"""CrowS-Pairs: which of two minimally different sentences is likelier (logprob only).

The definition is in `crows_pairs.py`; `card.md` describes source, items and scoring; `README.md` gives the
paper and runnable commands. The registry (`benchmarks/registry.py`) reads `BENCHMARK`.
"""

from safetyrepro.tasks.benchmarks.crows_pairs.crows_pairs import SOURCE, CrowsPairs

BENCHMARK = CrowsPairs

__all__ = ["BENCHMARK", "SOURCE", "CrowsPairs"]
