"""`safetyrepro sweep --task lm-eval:<task>`: a task SafetyRepro does not define, through its harness across the
task's envelope for the listed models, then read into the sweep's grid by the importer (docs/any_task.md).

The folder: `task_sweep.json` (what was asked: the task, the envelope's text and hash, the limit and the models),
`envelope.yaml`, `mapping.yaml` (the task's place in the grid), `templates/<task>__<template>.yaml` (lm-eval: each
declared template, and a multiple-choice task's generated twin, as a task YAML including the task's own),
`runs/<package>/<model>/<run>/seed<k>/` (lm-eval's own results and samples files, or Inspect's log; a folder per
configuration and seed, renamed into place whole), then what `safetyrepro import` writes (grid.csv, grid.parquet,
items.parquet, rules.yaml, run.json, provenance.csv, ...).
A run folder that exists is done: a rerun, or a run after kill -9, starts where it stopped, and the grid is
rebuilt from every finished run."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from safetyrepro.adapters.catalogue.model_specs import parse_model_spec
from safetyrepro.atomic import atomic_write, check_no_links, ensure_dir, replace_within
from safetyrepro.compat.lm_eval import ask_environment_once
from safetyrepro.errors import UserError
from safetyrepro.importers import import_inspect, import_lm_eval
from safetyrepro.importers.write import OUTPUTS, output_files
from safetyrepro.sweep.cell import cached_backend
from safetyrepro.sweep.progress import SweepProgress
from safetyrepro.sweep.store import slug

from .envelope import OWN_TEMPLATE, TaskConfig, TaskEnvelope, TaskRef, default_envelope, parse_envelope
from .inspect_task import InspectTask, inspect_model
from .inspect_task import run_config as run_inspect
from .lm_eval_task import LmEvalTask, generated_twin, variant_name, variant_yaml
from .lm_eval_task import run_config as run_lm_eval

RECORD = "task_sweep.json"
NOT_RUN = "not_run.json"  # "<model> <run>" -> why the model cannot run it
TEMPLATES = "templates"  # the variants' task YAMLs (lm-eval searches this folder, and only it, of `out`)


@dataclass
class TaskSweepOptions:
    task: TaskRef
    models: list[str]
    out: Path
    envelope: Path | None = None
    include_path: str | None = None
    limit: int | None = None
    precision: str = "bf16"
    device: str | None = None
    batch_size: int | None = None
    progress: bool = True
    metric: str | None = None  # the importer's --metric: which of the task's metrics is the cell's score


def open_task(task: TaskRef, include_path: str | None):
    """The task as its package loads it (refused here when it cannot be)."""
    if task.package == "inspect":
        if include_path:
            raise UserError("--include_path is lm-eval's; an Inspect task is a registered name or file.py[@task]")
        return InspectTask.open(task)
    return LmEvalTask.open(task, include_path)


def task_envelope(task: TaskRef, envelope_file: Path | None, include_path: str | None):
    """The opened task and its envelope: the rules file's, or the task's defaults."""
    opened = open_task(task, include_path)
    if envelope_file is None:
        return opened, default_envelope(task, opened.facts())
    try:
        text = Path(envelope_file).read_text()
    except OSError as e:
        raise UserError(f"--envelope {envelope_file}: {e.strerror}") from None
    env = parse_envelope(text, f"--envelope {envelope_file}")
    if env.task != task:
        raise UserError(f"--envelope {envelope_file} is the envelope of {env.task}, not of --task {task}")
    return opened, env


def _identity(o: TaskSweepOptions, env: TaskEnvelope) -> dict:
    return {"task": str(o.task), "envelope_sha256": env.sha256, "limit": o.limit, "precision": o.precision}


def _earlier(out: Path) -> dict | None:
    """Before the task is opened: a new or empty folder (None), or an earlier `sweep --task`'s record."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return None
    check_no_links(out, *(out / name for name in (RECORD, NOT_RUN, "runs", TEMPLATES, *OUTPUTS)))
    try:
        return json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        raise UserError(
            f"--out {out} holds files that no `safetyrepro sweep --task` wrote; choose another --out"
        ) from None


def _check_same(out: Path, earlier: dict | None, identity: dict) -> None:
    """An earlier sweep in `out` is resumed only when it asked the same task, envelope, limit and precision."""
    if earlier is not None and {k: earlier.get(k) for k in identity} != identity:
        diff = next(k for k in identity if earlier.get(k) != identity[k])
        raise UserError(
            f"--out {out} holds a sweep of other settings ({diff}: {earlier.get(diff)!r}, now {identity[diff]!r}); "
            "choose another --out"
        )


def variants(env: TaskEnvelope) -> list[tuple[str, str]]:
    """(template, scoring) of every task variant the envelope runs besides the task itself."""
    pairs = [(t, s) for s in env.scoring for t in env.template]
    return [p for p in pairs if p != (OWN_TEMPLATE, "own")]


def variant_texts(task: LmEvalTask, env: TaskEnvelope) -> dict[str, str]:
    """Each variant's task YAML by file name: a declared template's keys over the task's own, and for the generated
    twin its target and scoring derived from the (template's or task's) choices and target. Refused here, before
    anything is written: a task without a YAML of its own, a generated twin of a task not scored by its choices."""
    if not (pairs := variants(env)):
        return {}
    include = task.yaml_path()
    own = None
    if any(s != "own" for _, s in pairs):
        if task.facts().output_type != "multiple_choice":
            raise UserError(
                f"envelope: scoring generate_until derives a multiple-choice task's generated twin; {task.name} is "
                f"{task.facts().output_type} already"
            )
        own = task.task_object().config
    texts = {}
    for t, s in pairs:
        keys, name = dict(env.templates.get(t, {})), variant_name(task.name, t, s)
        if s != "own":  # its scoring: a module of the same name beside it (lm-eval's `!function <module>.<name>`)
            choice, target = (keys.get(k, getattr(own, k, None)) for k in ("doc_to_choice", "doc_to_target"))
            twin, texts[f"{name}_scores.py"] = generated_twin(task.name, choice, target, f"{name}_scores")
            keys |= twin
        texts[f"{name}.yaml"] = variant_yaml(include, task.name, t, keys, s)
    return texts


def mapping_text(task: LmEvalTask | InspectTask, env: TaskEnvelope | None = None) -> str:
    """The importer's mapping file: where the task's runs land in the grid (its `mapping_entries`)."""
    if isinstance(task, LmEvalTask):
        entries = task.mapping_entries(env.template, env.scoring) if env is not None else task.mapping_entries()
    else:
        entries = task.mapping_entries(env.epochs if env is not None else (1,))
    tasks = [{**e, "match": re.escape(e["match"])} for e in entries]
    return "# the task's place in the grid (safetyrepro sweep --task)\n" + yaml.safe_dump(
        {"tasks": tasks}, sort_keys=False
    )


def run_task_sweep(o: TaskSweepOptions) -> int:
    entries = [parse_model_spec(m) for m in o.models]  # refused before anything is loaded
    if len({e.label for e in entries}) < len(entries):
        raise UserError("--models names a model twice")
    if o.limit is not None and o.limit < 1:
        raise UserError("--limit must be 1 or more")
    earlier = _earlier(o.out)
    task, env = task_envelope(o.task, o.envelope, o.include_path)
    identity = _identity(o, env)
    _check_same(o.out, earlier, identity)
    # a variant includes the task's own YAML: a task without one is refused before anything is written
    texts = variant_texts(task, env) if isinstance(task, LmEvalTask) else {}
    out = ensure_dir(o.out)
    models = list(dict.fromkeys([*(earlier or {}).get("models", []), *(e.label for e in entries)]))  # all run here
    record = {**identity, "task_name": task.name, "models": models, "envelope": env.to_dict()}
    atomic_write(out / RECORD, json.dumps(record, indent=2) + "\n", root=out)
    atomic_write(out / "envelope.yaml", env.text(), root=out)
    atomic_write(out / "mapping.yaml", mapping_text(task, env), root=out)
    if isinstance(task, LmEvalTask) and texts:
        task = write_templates(out, task, env, texts)
    runs = out / "runs" / o.task.package
    not_run = _not_run(out)  # runs a model cannot do (no chat template), recorded so a rerun need not load it
    todo = [
        (entry, cfg, seed)
        for entry in entries
        for cfg in env.configs()
        for seed in env.seeds(cfg)
        if not (runs / slug(entry.label) / cfg.run_id / f"seed{seed}").is_dir()
        and f"{entry.label} {cfg.run_id}" not in not_run
    ]
    total = len(entries) * sum(len(env.seeds(c)) for c in env.configs())
    progress = SweepProgress(enabled=o.progress)
    progress.start(total, total - len(todo))
    try:
        for entry in dict.fromkeys(e for e, _, _ in todo):
            pending = [(c, s) for e, c, s in todo if e == entry]
            not_run |= _run_model(o, task, env, entry, pending, runs, progress)
            atomic_write(out / NOT_RUN, json.dumps(not_run, indent=1, sort_keys=True) + "\n", root=out)
    finally:
        progress.stop()
    for part in sorted(runs.rglob(".*.part")) if runs.is_dir() else []:  # killed runs of models not asked again
        shutil.rmtree(part, ignore_errors=True)
    asked = {f"{e.label} {c.run_id}" for e in entries for c in env.configs()}
    not_asked = [f"{k}: {v}" for k, v in sorted(not_run.items()) if k in asked]
    return _import_grid(out, o.task.package, task.name, not_asked, o.metric)


def write_templates(out: Path, task: LmEvalTask, env: TaskEnvelope, texts: dict[str, str] | None = None) -> LmEvalTask:
    """Each variant the envelope runs (a declared template, the generated twin), written as a task YAML that
    includes the task's own; the task then found by a manager that searches that folder too, every variant checked
    to be found before anything runs."""
    texts = variant_texts(task, env) if texts is None else texts
    folder = ensure_dir(out / TEMPLATES, root=out)
    for name, text in texts.items():
        atomic_write(folder / name, text, root=out)
    opened = task.with_templates(folder)
    for t, s in variants(env):
        opened.variant(t, s)
    return opened


def _not_run(out: Path) -> dict[str, str]:
    try:
        return dict(json.loads((out / NOT_RUN).read_text()))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError):
        raise UserError(f"--out {out}: {NOT_RUN} is not what `sweep --task` writes; remove it to run again") from None


def _run_model(o, task, env, entry, pending, runs: Path, progress: SweepProgress) -> dict[str, str]:
    """One model's pending runs. lm-eval: the model loaded once behind the outputs cache (a rerun asks it nothing
    new); Inspect: its provider (SafetyRepro's engine is loaded once a process)."""
    run = _opened(o, task, entry)
    skipped: dict[str, str] = {}
    for cfg, seed in pending:
        if cfg.chat_template and run.chatless:
            skipped[f"{entry.label} {cfg.run_id}"] = "the model has no chat template"
            progress.advance(0)
            continue
        progress.describe(f"{entry.label} {cfg.run_id} seed {seed}")
        final = runs / slug(entry.label) / cfg.run_id / f"seed{seed}"
        ensure_dir(final.parent, root=o.out)
        part = final.with_name(f".{final.name}.part")
        shutil.rmtree(part, ignore_errors=True)  # a run killed before its rename: begun again
        run.call(env, cfg, seed, part)
        replace_within(part, final, root=o.out)
        progress.advance(o.limit or 0)
    return skipped


@dataclass
class _Runner:
    """One model opened for a package's runs: `call(env, cfg, seed, folder)` writes one run."""

    call: Callable[[TaskEnvelope, TaskConfig, int, Path], None]
    chatless: bool = False


def _opened(o: TaskSweepOptions, task, entry) -> _Runner:
    if isinstance(task, InspectTask):
        model = inspect_model(entry, o.precision, o.device, o.batch_size)
        return _Runner(lambda env, cfg, seed, folder: run_inspect(task, model, env, cfg, seed, o.limit, folder))
    from safetyrepro.adapters.plugins.plugin_lm_eval import SafetyReproLM  # lazy: lm-eval and torch

    backend = cached_backend(entry, o.precision, o.device, o.batch_size)
    lm = SafetyReproLM.from_backend(backend)
    lm.progress_bars = False
    ask_environment_once()
    return _Runner(
        lambda env, cfg, seed, folder: run_lm_eval(
            task.variant(cfg.template, cfg.scoring), lm, env, cfg, seed, o.limit, folder
        ),
        chatless=not backend.capabilities.chat_template,
    )


def _import_grid(out: Path, package: str, task_name: str, skipped: list[str], metric: str | None = None) -> int:
    """The finished runs read by `safetyrepro import lm-eval|inspect`, its files written beside them."""
    read = import_inspect if package == "inspect" else import_lm_eval
    imported = read([str(out / "runs" / package)], metric=metric, mapping=str(out / "mapping.yaml"))
    for name, data in output_files(imported).items():  # what `safetyrepro import` writes, beside the runs
        atomic_write(out / name, data, root=out)
    grid = imported.grid
    print(
        f"sweep --task: {len(grid)} cells ({grid['model'].nunique()} models x {grid['config_id'].nunique()} "
        f"configurations) of {task_name} in {out / 'grid.csv'}; next: safetyrepro analyze {out / 'grid.csv'} "
        f"--out {out / 'analysis'}"
    )
    for line in skipped:
        print(f"  not run: {line}")
    for w in imported.warnings:
        print(f"  {w}")
    return 0
