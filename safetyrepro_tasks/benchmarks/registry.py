"""The benchmarks by name: one line per benchmark folder beside this file.

Adding a sixth benchmark is one folder `benchmarks/<name>/` (its module, tasks.py, card.md,
README.md; see docs/adding_a_benchmark.md) and one line in BENCHMARKS. Everything else reads this
tuple: the envelope's benchmarks, the lm-eval YAMLs (generated), the Inspect tasks (each folder's
tasks.py, checked against the definition) and metrics, the sweep, and the tests' counts. A folder's
`__init__.py` exposes its class as `BENCHMARK`.
"""

from __future__ import annotations

import importlib
from functools import cache

from safetyrepro.errors import UserError, one_of

BENCHMARKS: tuple[str, ...] = (
    "truthfulqa",
    "bbq",
    "crows_pairs",
    "toxigen",
    "xstest",
)


@cache
def get_benchmark(name: str):
    """The definition of one benchmark (a `safetyrepro.tasks.benchmark.Benchmark`)."""
    if name not in BENCHMARKS:
        raise one_of("benchmark", name, BENCHMARKS)
    module = importlib.import_module(f"{__package__}.{name}")
    bench = module.BENCHMARK()
    if bench.name != name:
        raise UserError(
            f"benchmark folder {name!r} defines a benchmark named {bench.name!r}; "
            "the folder, the registry line and `name` must agree"
        )
    return bench


def task_export(package: str, name: str):
    """A benchmark folder's module `__getattr__`: its Inspect @task `name` (the folder's tasks.py), exported
    as inspect_evals packages export theirs but loaded on first use, since inspect_ai takes seconds to
    import and lm-eval and the analysis never need it."""

    def __getattr__(attr: str):
        if attr == name:
            return getattr(importlib.import_module(f"{package}.tasks"), name)
        raise AttributeError(f"module {package!r} has no attribute {attr!r}")

    return __getattr__
