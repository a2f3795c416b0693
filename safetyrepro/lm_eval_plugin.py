"""Make plain `lm_eval` see SafetyRepro: `--model safetyrepro` and the `safetyrepro_*` tasks.

lm-eval 0.4 has no plugin entry points for models or task folders. A one-line `.pth` file
(`safetyrepro_lm_eval.pth`, installed beside the package, the device setuptools itself uses for
`distutils-precedence.pth`) imports this module at interpreter start-up. It installs an import hook
that acts only when lm-eval itself is imported, and then through `safetyrepro.compat.lm_eval`:
- when `lm_eval.api.registry` is loaded: registers the model `safetyrepro` with lm-eval's public
  decorator `register_model`;
- when `lm_eval.tasks` is loaded: appends SafetyRepro's own YAML folder to the TaskManager's include
  paths (unless the caller already passed it, or asked for no default tasks).
Nothing in lm-eval's installed folder is written or changed on disk. A step that fails says so on
stderr, naming the lm-eval version and what is lost; lm-eval itself keeps working. Set
SAFETYREPRO_NO_LM_EVAL_HOOK=1 to switch it off (then use `--include_path` and
`safetyrepro.adapters.plugins.plugin_lm_eval` yourself). The YAMLs' functions are in
`safetyrepro.tasks.lm_eval_task_functions`; the Inspect counterpart is `safetyrepro.inspect_plugin`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path

MODEL_ALIAS = "safetyrepro"


def task_dir() -> Path:
    """The folder of SafetyRepro's lm-eval YAMLs, rendered from the benchmark definitions on first use
    and kept in the cache (safetyrepro.tasks.lm_eval_tasks.generated_dir)."""
    from safetyrepro.tasks.lm_eval_tasks import generated_dir

    return generated_dir()


def _model_class():
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM

    return SafetyReproLM


def _after_registry(module) -> None:
    from safetyrepro.compat.lm_eval import register_model_class

    register_model_class(MODEL_ALIAS, _model_class)


def _after_manager(module) -> None:
    from safetyrepro.compat.lm_eval import add_task_folder_to_task_manager

    add_task_folder_to_task_manager(module, task_dir)


# module -> (what to do once it is loaded, what is lost when that fails)
_HOOKS = {
    "lm_eval.api.registry": (_after_registry, f"--model {MODEL_ALIAS} is not available"),
    "lm_eval.tasks": (
        _after_manager,
        "the safetyrepro_* tasks need --include_path "
        "$(python -c 'import safetyrepro.lm_eval_plugin as p; print(p.task_dir())')",
    ),
}


def _apply(name: str, module) -> None:
    after, lost = _HOOKS[name]
    try:
        after(module)
    except Exception as e:  # lm-eval keeps working for everything else; the user is told what is lost
        from safetyrepro.compat.lm_eval import installed_version

        sys.stderr.write(
            f"safetyrepro: ERROR: could not hook into lm-eval {installed_version()} at {name} "
            f"({type(e).__name__}: {e}); {lost}. Supported lm-eval versions: see "
            "docs/compat.md (set SAFETYREPRO_NO_LM_EVAL_HOOK=1 to switch the hook off)\n"
        )


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name: str):
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        _apply(self.name, module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, name)
        return spec


def install() -> None:
    if os.environ.get("SAFETYREPRO_NO_LM_EVAL_HOOK"):
        return
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    for name in _HOOKS:  # lm-eval already imported: apply at once
        if name in sys.modules:
            _apply(name, sys.modules[name])
    sys.meta_path.insert(0, _Finder())


install()
