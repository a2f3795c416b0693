"""The Inspect tasks `safetyrepro/<benchmark>`, one per registered benchmark: each is the visible
`@task` in its folder's `tasks.py` (as in inspect_evals, a reader and a linter find it there),
checked here against the benchmark's own definition so that its `Literal` parameters can never drift
from the templates, scorings, shots, tie rules and few-shot draws the rest of the project uses.

The inspect_ai entry point (`safetyrepro.inspect_plugin`) imports this module; importing it registers
every task.
"""

from __future__ import annotations

import importlib
import inspect
import typing

from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmark import DEFAULT_TIE_RULE, TIE_RULES
from safetyrepro.tasks.benchmarks import registry
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.envelope import default_rules
from safetyrepro.tasks.subsets import DEFAULT_FEWSHOT_DRAW, FEWSHOT_DRAWS

TASK_MODULE = "tasks"  # the file in each benchmark folder that holds its @task


def expected_parameters(benchmark: str) -> dict[str, tuple[tuple, object]]:
    """parameter -> (its Literal values, its default), from the benchmark's definition and the rules."""
    bench = get_benchmark(benchmark)
    return {
        "template": (tuple(bench.templates), "T1"),
        "scoring": (tuple(bench.scorings), bench.default_scoring),
        "shots": (tuple(default_rules().axes["shots"]), 0),
        "tie_rule": (tuple(TIE_RULES), DEFAULT_TIE_RULE),
        "fewshot_draw": (tuple(FEWSHOT_DRAWS), DEFAULT_FEWSHOT_DRAW),
    }


def check_task(benchmark: str, fn) -> None:
    """Refuse a folder's @task whose name, parameters, `Literal` values or defaults disagree with the
    benchmark's definition, naming the first disagreement."""
    where = f"benchmarks/{benchmark}/{TASK_MODULE}.py"
    name = getattr(fn, "__name__", None)
    if name != benchmark:
        raise UserError(
            f"{where}: the @task function is named {name!r}; it must be named {benchmark!r}, "
            "the folder's name, which `inspect eval safetyrepro/<name>` uses"
        )
    params = inspect.signature(fn, eval_str=True).parameters
    expected = expected_parameters(benchmark)
    if list(params) != list(expected):
        raise UserError(f"{where}: parameters {list(params)}; expected {list(expected)}")
    for p, (values, default) in expected.items():
        got = typing.get_args(params[p].annotation)
        if typing.get_origin(params[p].annotation) is not typing.Literal or got != values:
            raise UserError(
                f"{where}: {p} is {params[p].annotation}; the benchmark's definition says Literal{list(values)}"
            )
        if params[p].default != default:
            raise UserError(f"{where}: {p} defaults to {params[p].default!r}; the definition says {default!r}")


def load_task(benchmark: str):
    """The @task in the benchmark's folder, checked."""
    get_benchmark(benchmark)  # an unknown name is refused with the registered ones
    module_name = f"{registry.__package__}.{benchmark}.{TASK_MODULE}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise UserError(
            f"benchmark folder {benchmark!r} has no {TASK_MODULE}.py, the file that holds its Inspect "
            "@task (docs/adding_a_benchmark.md)"
        ) from None
    fn = getattr(module, benchmark, None)
    if fn is None:
        raise UserError(f"benchmarks/{benchmark}/{TASK_MODULE}.py defines no @task named {benchmark!r}")
    check_task(benchmark, fn)
    return fn


# name -> @task, one per registered benchmark
TASKS = {b: load_task(b) for b in BENCHMARKS}
