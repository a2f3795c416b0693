"""Every lm-evaluation-harness internal SafetyRepro relies on, and every patch it makes to lm-eval,
and nowhere else (tested window: pyproject.toml, docs/compat.md).

Nothing here imports lm-eval at module level: `safetyrepro.lm_eval_plugin` imports this module at
interpreter start-up and calls into it only once lm-eval itself is being imported.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import subprocess
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def installed_version() -> str:
    try:
        return version("lm-eval")
    except PackageNotFoundError:
        return "?"


# ----------------------------------------------------------------------------- the start-up plugin


def register_model_class(alias: str, load_class: Callable[[], type]) -> None:
    """Register an LM class under `alias` through lm-eval's public decorator `register_model`.

    lm-eval's registry is filled with its own models on first use only while it is empty, so its
    built-ins (`hf`, ...) are registered first; registering an alias that is already there (with this
    very class) is a no-op."""
    import lm_eval.models  # noqa: F401  (lm-eval's own models first: get_model fills an empty registry only)
    from lm_eval.api import registry

    models = getattr(registry, "model_registry", None) or registry.MODEL_REGISTRY
    if alias in models:
        return
    registry.register_model(alias)(load_class())


def add_task_folder_to_task_manager(tasks_module, folder: Callable[[], Path]) -> None:
    """Make every `TaskManager` index `folder()` besides lm-eval's own tasks (as `--include_path`
    would), unless the caller passed that folder already or asked for no default tasks.

    lm-eval 0.4 has no plugin entry point for task folders: this wraps `TaskManager.__init__`, taken
    from `lm_eval.tasks` (defined there up to 0.4.11, re-exported from `lm_eval.tasks.manager` since)."""
    cls = tasks_module.TaskManager
    if getattr(cls, "_safetyrepro_wrapped", False):
        return
    original = cls.__init__
    sig = inspect.signature(original)
    if "include_path" not in sig.parameters:
        raise TypeError(f"lm-eval {installed_version()}: TaskManager takes no include_path")

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        if bound.arguments.get("include_defaults", True):
            paths = bound.arguments.get("include_path")
            paths = [] if paths is None else list(paths) if isinstance(paths, (list, tuple)) else [paths]
            ours = folder()
            if all(Path(p).resolve() != ours for p in paths):
                bound.arguments["include_path"] = [*paths, str(ours)]
        original(*bound.args, **bound.kwargs)

    cls.__init__ = __init__
    cls._safetyrepro_wrapped = True


# ----------------------------------------------------------------------------- the sweep's driver


LOGGERS = ("lm_eval", "lm-eval", "lm_eval.evaluator", "lm_eval.api.task")


def quiet_logs() -> None:
    """lm-eval's own loggers at ERROR: a sweep prints its progress, not lm-eval's per-run notes."""
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def ask_environment_once() -> None:
    """lm-eval describes the machine on every evaluate call: `git describe` in the working directory
    (printing 'fatal: not a git repository' outside one) and torch's `collect_env` report (pip, conda,
    lscpu and nvidia-smi subprocesses, about 0.8 s a call, that is two minutes of a full-envelope
    sweep's 144 calls). Neither answer can change within a sweep, so each is asked once per process
    and copied into every later call's results."""
    import lm_eval.evaluator as evaluator

    if getattr(evaluator.get_git_commit_hash, "cache_info", None):
        return

    @functools.cache
    def git_hash():
        try:
            return (
                subprocess.run(["git", "describe", "--always"], capture_output=True, text=True).stdout.strip() or None
            )
        except OSError:
            return None

    original_env_info = evaluator.add_env_info

    @functools.cache
    def env_info() -> dict:
        found: dict = {}
        original_env_info(found)
        return found

    def add_env_info(storage: dict) -> None:
        storage.update(copy.deepcopy(env_info()))

    evaluator.get_git_commit_hash = git_hash
    evaluator.add_env_info = add_env_info


@contextlib.contextmanager
def no_request_building_bar():
    """lm-eval draws a tqdm bar per task while it builds requests; in a sweep that is one bar per cell
    and seed under the sweep's own progress bar, so switch that one off for the duration of the call."""
    import lm_eval.api.task as task_module

    original = task_module.tqdm
    task_module.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        task_module.tqdm = original


# ----------------------------------------------------------------------------- the cross-package study


def native_task_yaml(task_manager, name: str) -> dict:
    """lm-eval's own config of a registered task: its YAML with `!function` references resolved."""
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = task_manager._entry(name)
    if entry is None or entry.yaml_path is None:
        raise RuntimeError(f"lm-eval has no native task {name!r}")
    return dict(load_yaml(entry.yaml_path, resolve_func=True))


# ----------------------------------------------------------------------------- tests


def hf_tokenizer_kwargs(add_special_tokens: bool | None) -> dict:
    """The keyword arguments HFLM's tok_encode hands the tokenizer (lm_eval.models.utils)."""
    from lm_eval.models.utils import _add_special_kwargs

    return _add_special_kwargs(add_special_tokens, None)


def model_required_args(name: str) -> list[str] | None:
    """The constructor arguments an lm-eval model cannot do without (no default), read from its
    class's signature; None when the class cannot be imported here (e.g. vllm without its package).
    Checked against lm-eval 0.4.13."""
    import lm_eval.models  # noqa: F401  (registers the built-in models)
    from lm_eval.api import registry

    try:
        cls = registry.get_model(name)
    except Exception:  # noqa: BLE001 - an optional backend's import error: lm-eval says why when it runs
        return None
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
