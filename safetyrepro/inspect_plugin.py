"""Inspect AI's entry point for SafetyRepro (`[project.entry-points.inspect_ai]` in pyproject.toml):
importing it registers the tasks `safetyrepro/<benchmark>` (one per registered benchmark) and the
model provider `safetyrepro/<model>`. Its lm-eval counterpart is `safetyrepro.lm_eval_plugin`."""

from safetyrepro.adapters.plugins import plugin_inspect  # noqa: F401  (registers @modelapi "safetyrepro")
from safetyrepro.tasks.inspect_task_registry import TASKS  # noqa: F401  (registers each folder's @task)
