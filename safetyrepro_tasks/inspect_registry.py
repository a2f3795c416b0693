"""Inspect entry point (`[project.entry-points.inspect_ai]`): the tasks `safetyrepro/<benchmark>` and
the model provider `safetyrepro/<model>`."""

from safetyrepro.adapters import inspect_provider  # noqa: F401  (registers @modelapi "safetyrepro")
from safetyrepro.tasks.inspect_tasks import bbq, crows_pairs, toxigen, truthfulqa, xstest  # noqa: F401
