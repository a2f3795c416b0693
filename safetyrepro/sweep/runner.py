"""The local executor: every cell of the plan, one model loaded at a time, with a live progress bar."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.sweep.cell import CellRunner, CellSetup, not_applicable_record
from safetyrepro.sweep.plan import Cell, SweepSpec
from safetyrepro.sweep.store import Store
from safetyrepro.tasks.envelope import Rules


@dataclass
class SweepResult:
    total: int
    done_before: int
    ran: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    not_applicable: int = 0
    model_work: bool = False
    elapsed_s: float = 0.0
    outputs: dict[str, Path] = field(default_factory=dict)


def pending_cells(cells: list[Cell], store: Store) -> list[Cell]:
    return [c for c in cells if store.done(c.model, c.file_stem, c.key) is None]


def commit_not_applicable(
    cells: list[Cell], setup: CellSetup, store: Store, result: SweepResult, progress
) -> list[Cell]:
    """Record the pending cells no backend call can compute; return the rest."""
    rest = []
    for c in cells:
        if c.applicable:
            rest.append(c)
            continue
        n = len(setup.item_ids(c.config.benchmark))
        store.commit(c.model, c.file_stem, not_applicable_record(c, setup.spec, setup.rules, n))
        result.not_applicable += 1
        progress.advance(0)
    return rest


def run_local(
    setup: CellSetup, cells: list[Cell], store: Store, runner_for: Callable[[str], CellRunner], progress
) -> SweepResult:
    """Run the cells not yet committed, one model at a time (`runner_for(label)` opens it); a model that
    fails to load, or a cell that fails, is recorded as failed and the sweep goes on."""
    start = time.time()
    pending = pending_cells(cells, store)
    result = SweepResult(total=len(cells), done_before=len(cells) - len(pending))
    progress.start(total=len(cells), done=result.done_before)
    pending = commit_not_applicable(pending, setup, store, result, progress)
    for model in setup.spec.models:
        todo = [c for c in pending if c.model == model]
        if not todo:
            continue
        result.model_work = True
        runner = runner_for(model)
        for cell in todo:
            if runner.model is not None:
                progress.describe(f"{model} {cell.config.config_id}")
            n = len(setup.item_ids(cell.config.benchmark)) * len(cell.seeds) if runner.model is not None else 0
            commit(store, result, progress, runner.run(cell), cell, n)
    progress.stop()
    result.elapsed_s = time.time() - start
    return result


def commit(store: Store, result: SweepResult, progress, record: dict, cell: Cell, n: int) -> None:
    """Keep a cell's record (ok or failed) and count it; `n`: its item answers, for the progress bar."""
    store.commit(cell.model, cell.file_stem, record)
    if record["status"] == "failed":
        result.failed.append((cell.key, record["error"]))
    else:
        result.ran += 1
    progress.advance(n, failed=record["status"] == "failed")


def write_run_json(
    store: Store, spec: SweepSpec, rules: Rules, engines: dict[str, dict], items_for, result: SweepResult
) -> Path:
    packages = {}
    for dist in (
        "safetyrepro",
        "lm_eval",
        "inspect_ai",
        "transformers",
        "torch",
        "numpy",
        "pandas",
        "accelerate",
        "bitsandbytes",
        "crfm-helm",
        "ray",
        "vllm",
        "llama_cpp_python",
    ):
        try:
            packages[dist] = version(dist)
        except PackageNotFoundError:
            continue
    subsets = {}
    for b in spec.benchmarks:
        s = items_for(b)
        subsets[b] = s.subset_id
    previous = {}
    path = store.root / "run.json"
    if path.exists():
        previous = json.loads(path.read_text()).get("models_by_label", {})
    models_by_label = {**previous, **engines}
    record = {
        "rules_sha256": rules.sha256,
        "rules_path": rules.path,
        "spec": spec.identity(),
        "tie_rule": spec.tie_rule,
        "fewshot_draw": spec.fewshot_draw,
        "score_precision": "log-likelihoods from a float32 LM head (engine); other backends as their package computes",
        "models": [{"label": m, **models_by_label.get(m, {})} for m in spec.models],
        "models_by_label": models_by_label,
        "item_subsets": subsets,
        "few_shot_demos": {b: {k: [i.id for i in v] for k, v in items_for(b).demos.items()} for b in spec.benchmarks},
        "sampling_seeds": list(rules.decodings["moderate"].seeds) if "moderate" in rules.decodings else [],
        "packages": packages,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "cpus": _cpus(),
            "memory_bytes": _memory_bytes(),
        },
        "cells": {"total": result.total, "failed": len(result.failed)},
    }
    atomic_write(path, json.dumps(record, indent=2), root=store.root)
    return path


def _memory_bytes() -> int | None:
    """The machine's physical memory (the GRID card prints it beside the cores), None where unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
