"""Every Inspect AI internal SafetyRepro relies on, and nowhere else (tested window: pyproject.toml,
docs/compat.md). Each name says what it is for; when Inspect moves one, this file is the fix."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

# A task or model that cannot run prints as one message, without a traceback, in `inspect eval`.
from inspect_ai._util.error import PrerequisiteError  # noqa: F401  (re-exported)


def default_max_tokens() -> int:
    """The generation budget Inspect assumes when a model states none."""
    from inspect_ai._util.constants import (
        DEFAULT_MAX_TOKENS,  # lazy: Inspect's private modules load with the feature that needs them
    )

    return DEFAULT_MAX_TOKENS


def active_generate_config():
    """The GenerateConfig of the eval being built or run (`--temperature`, ...)."""
    from inspect_ai.model._generate_config import (
        active_generate_config as active,  # lazy: Inspect's private modules load with the feature that needs them
    )

    return active()


def active_model():
    """The eval's model while Inspect builds its tasks (None outside an eval)."""
    from inspect_ai.model._model import (
        active_model as active,  # lazy: Inspect's private modules load with the feature that needs them
    )

    return active()


def parse_multiple_choice_answers(completion: str, choices: list[str]) -> set[str]:
    """The letters Inspect's own multiple_choice() solver reads in a completion (its answer
    normalisation, for the cross-package study)."""
    from inspect_ai.solver._multiple_choice import (
        parse_answers,  # lazy: Inspect's private modules load with the feature that needs them
    )

    state: Any = SimpleNamespace(output=SimpleNamespace(completion=completion), choices=list(choices))
    return set(parse_answers(state, False))


def provider_names() -> set[str]:
    """The model providers Inspect knows (`<provider>/<model>`), its built-ins and plugins'."""
    import inspect_ai.model._providers.providers  # noqa: F401  (registers the built-in providers)  # lazy: Inspect's private modules load with the feature that needs them
    from inspect_ai._util.registry import (  # lazy: Inspect's private modules load with the feature that needs them
        registry_find,
        registry_info,
        registry_unqualified_name,
    )

    apis = registry_find(lambda info: info.type == "modelapi")
    return {registry_unqualified_name(registry_info(api)) for api in apis}


def load_tasks(spec: str, task_args: dict[str, Any] | None = None) -> list:
    """The Task objects `inspect eval SPEC -T ...` would run (a registered name, `file.py`, `file.py@task`), built
    afresh (task_with changes a task in place), for `sweep --task inspect:...`."""
    from inspect_ai._eval.loader import (
        load_tasks as load,  # lazy: Inspect's private modules load with the feature that needs them
    )

    return load([spec], dict(task_args or {}))
