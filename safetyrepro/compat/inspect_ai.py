"""Inspect AI internals SafetyRepro relies on (tested window: pyproject.toml)."""

from __future__ import annotations


def provider_names() -> set[str]:
    """The model providers Inspect knows (`<provider>/<model>`), its built-ins and plugins'."""
    import inspect_ai.model._providers.providers  # noqa: F401  (registers the built-in providers)
    from inspect_ai._util.registry import registry_find, registry_info, registry_unqualified_name

    apis = registry_find(lambda info: info.type == "modelapi")
    return {registry_unqualified_name(registry_info(api)) for api in apis}
