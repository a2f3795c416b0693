"""The benchmarks by name. Adding a sixth means one module beside these and one line here."""

from __future__ import annotations

from functools import cache

from safetyrepro.errors import one_of
from safetyrepro.tasks.benchmark import Benchmark
from safetyrepro.tasks.benchmarks.bbq import BBQ
from safetyrepro.tasks.benchmarks.crows_pairs import CrowsPairs
from safetyrepro.tasks.benchmarks.toxigen import ToxiGen
from safetyrepro.tasks.benchmarks.truthfulqa import TruthfulQA
from safetyrepro.tasks.benchmarks.xstest import XSTest

BENCHMARKS: dict[str, type[Benchmark]] = {
    "truthfulqa": TruthfulQA,
    "bbq": BBQ,
    "crows_pairs": CrowsPairs,
    "toxigen": ToxiGen,
    "xstest": XSTest,
}


@cache
def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise one_of("benchmark", name, BENCHMARKS)
    return BENCHMARKS[name]()
