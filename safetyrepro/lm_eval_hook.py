"""Make plain `lm_eval` see SafetyRepro: `--model safetyrepro` and the `safetyrepro_*` tasks.

lm-eval 0.4 has no plugin entry points for models or task folders. A one-line `.pth` file
(installed beside the package, the device setuptools itself uses for `distutils-precedence.pth`)
imports this module at interpreter start-up. It installs an import hook that acts only when
lm-eval itself is imported, and then only through lm-eval's public surface:
- `lm_eval.api.registry`: registers the lazy alias `safetyrepro` in the model registry;
- `lm_eval.tasks.manager`: appends SafetyRepro's own YAML folder to the TaskManager's include
  paths (unless the caller already passed it, or asked for no default tasks).
Nothing in lm-eval's installed folder is written or changed on disk. Set
SAFETYREPRO_NO_LM_EVAL_HOOK=1 to switch it off (then use `--include_path` and
`safetyrepro.adapters.lm_eval_model` yourself).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path

TASK_DIR = Path(__file__).resolve().parent.parent / "safetyrepro_tasks" / "lm_eval_yaml"
MODEL_TARGET = "safetyrepro.adapters.lm_eval_model:SafetyReproLM"


def task_dir() -> Path:
    """The folder of SafetyRepro's lm-eval YAMLs, in a source checkout or an installed wheel."""
    if TASK_DIR.is_dir():
        return TASK_DIR
    import safetyrepro.tasks

    return Path(safetyrepro.tasks.__file__).resolve().parent / "lm_eval_yaml"


def _after_registry(module) -> None:
    import lm_eval.models  # noqa: F401  (get_model only imports the built-ins while the registry is empty)

    if "safetyrepro" not in module.model_registry:
        module.model_registry.register("safetyrepro", target=MODEL_TARGET)


def _after_manager(module) -> None:
    import inspect

    cls = module.TaskManager
    if getattr(cls, "_safetyrepro_wrapped", False):
        return
    original = cls.__init__
    sig = inspect.signature(original)

    def __init__(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        if bound.arguments.get("include_defaults", True):
            paths = bound.arguments.get("include_path")
            paths = [] if paths is None else list(paths) if isinstance(paths, (list, tuple)) else [paths]
            ours = task_dir()
            if all(Path(p).resolve() != ours for p in paths):
                bound.arguments["include_path"] = [*paths, str(ours)]
        original(*bound.args, **bound.kwargs)

    cls.__init__ = __init__
    cls._safetyrepro_wrapped = True


_HOOKS = {"lm_eval.api.registry": _after_registry, "lm_eval.tasks.manager": _after_manager}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, after):
        self.inner, self.after = inner, after

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        try:
            self.after(module)
        except Exception as e:  # never break lm-eval because of us
            sys.stderr.write(f"safetyrepro: lm-eval hook skipped ({e})\n")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        after = _HOOKS.get(name)
        if after is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, after)
        return spec


def install() -> None:
    if os.environ.get("SAFETYREPRO_NO_LM_EVAL_HOOK"):
        return
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    for name, after in _HOOKS.items():  # lm-eval already imported: apply at once
        if name in sys.modules:
            after(sys.modules[name])
    sys.meta_path.insert(0, _Finder())


install()
