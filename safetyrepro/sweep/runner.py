"""The local executor: every cell of the plan, one model loaded at a time, with a live progress bar."""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from safetyrepro.atomic import atomic_write
from safetyrepro.errors import UserError
from safetyrepro.grid_schema import grid_row
from safetyrepro.provenance import source_commit
from safetyrepro.sweep.outputs_cache import OutputsCacheError
from safetyrepro.sweep.plan import Cell, SweepSpec
from safetyrepro.sweep.records import summarize
from safetyrepro.sweep.store import Store
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import Rules

if TYPE_CHECKING:  # drivers load lm-eval's glue: only the type is needed here
    from safetyrepro.sweep.drivers import _Driver


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


def cell_record(
    cell: Cell, spec: SweepSpec, rules: Rules, identity: dict, records, items, elapsed: float, cpu: float | None = None
) -> dict:
    bench = get_benchmark(cell.config.benchmark)
    summary = summarize(records, bench, items)
    cfg = cell.config
    row = grid_row(
        cell.model,
        cfg,
        cfg.precision,
        spec.package,
        summary.n_items,
        len(summary.seed_scores),
        summary.score,
        summary.parse_rate,
        rules.tier(cfg),
        cfg.config_id,
        status=None,
        seed_scores=json.dumps({str(k): v for k, v in summary.seed_scores.items()}),
        extra_metrics=json.dumps(summary.extra),
        subset_id=items.subset_id,
        weights_sha256=identity.get("weights_sha256") or "",
        tie_rate=summary.tie_rate,
    )
    # elapsed time and provenance stay out of the grid row, so a resumed sweep's grid is byte-identical to an
    # uninterrupted one; computed_by says which code made the numbers (the engine's decode version included)
    computed_by = {"commit": source_commit()}
    if identity.get("kind") == "engine":
        computed_by["decode"] = (identity.get("extra") or {}).get("decode", 1)
    # cpu_s (the process's CPU seconds, every thread) says what the cell cost whatever else ran on the machine
    timing = {"elapsed_s": round(elapsed, 3)} | ({} if cpu is None else {"cpu_s": round(cpu, 3)})
    return {
        "key": cell.key,
        "status": "ok",
        "row": row,
        **timing,
        "computed_by": computed_by,
        "items": [r.to_dict() for r in records],
    }


def failed_record(cell: Cell, error: str) -> dict:
    return {
        "key": cell.key,
        "status": "failed",
        "error": error,
        "model": cell.model,
        "config_id": cell.config.config_id,
    }


def not_applicable_record(cell: Cell, spec: SweepSpec, rules: Rules, n_items: int) -> dict:
    """A cell the model's backend cannot run (logprob scoring without continuation log-likelihoods):
    kept in the grid with its status, never scored, left out of every analysis slice."""
    cfg = cell.config
    row = grid_row(
        cell.model,
        cfg,
        cfg.precision,
        spec.package,
        n_items,
        len(cell.seeds),
        None,
        None,
        rules.tier(cfg),
        cfg.config_id,
        status=None,
    )
    return {
        "key": cell.key,
        "status": "not_applicable",
        "row": row,
        "items": [],
        "reason": "the backend gives no continuation log-likelihoods",
    }


def cell_item_ids(items, limit: int | None) -> list[str]:
    return [it.id for it in (items.items[:limit] if limit else items.items)]


def pending_cells(cells: list[Cell], store: Store) -> list[Cell]:
    return [c for c in cells if store.done(c.model, c.file_stem, c.key) is None]


def commit_not_applicable(
    cells: list[Cell], spec: SweepSpec, rules: Rules, store: Store, items_for, result: SweepResult, progress
) -> list[Cell]:
    """Record the pending cells no backend call can compute; return the rest."""
    rest = []
    for c in cells:
        if c.applicable:
            rest.append(c)
            continue
        n = len(cell_item_ids(items_for(c.config.benchmark), spec.limit))
        store.commit(c.model, c.file_stem, not_applicable_record(c, spec, rules, n))
        result.not_applicable += 1
        progress.advance(0)
    return rest


def run_local(
    spec: SweepSpec,
    cells: list[Cell],
    store: Store,
    rules: Rules,
    open_driver: Callable[[str], _Driver],
    items_for,
    progress,
) -> SweepResult:
    """Run the cells not yet committed; a model that fails to load, or a cell that fails, is recorded
    as failed and the sweep goes on."""
    start = time.time()
    pending = pending_cells(cells, store)
    result = SweepResult(total=len(cells), done_before=len(cells) - len(pending))
    progress.start(total=len(cells), done=result.done_before)
    pending = commit_not_applicable(pending, spec, rules, store, items_for, result, progress)
    for model in spec.models:
        todo = [c for c in pending if c.model == model]
        if not todo:
            continue
        result.model_work = True
        try:
            driver = open_driver(model)
        except OutputsCacheError:
            raise  # the cache, not the model: stop the sweep (finished cells are kept)
        except Exception as e:  # a model that cannot load fails its cells, not the sweep
            msg = f"model failed to load: {_one_line(e)}"
            for c in todo:
                store.commit(c.model, c.file_stem, failed_record(c, msg))
                result.failed.append((c.key, msg))
                progress.advance(0, failed=True)
            continue
        for cell in todo:
            items = items_for(cell.config.benchmark)
            ids = cell_item_ids(items, spec.limit)
            progress.describe(f"{model} {cell.config.config_id}")
            t0, c0 = time.time(), time.process_time()
            try:
                records = driver.run_cell(cell.config, cell.seeds, ids)
                rec = cell_record(
                    cell, spec, rules, driver.identity, records, items, time.time() - t0, time.process_time() - c0
                )
            except OutputsCacheError:
                raise  # every later cell would fail the same way: stop the sweep, finished cells are kept
            except Exception as e:
                # the traceback with -v (the CLI sets INFO logging); the cell's one line either way
                logging.getLogger(__name__).info("%s failed", cell.key, exc_info=True)
                store.commit(cell.model, cell.file_stem, failed_record(cell, _one_line(e)))
                result.failed.append((cell.key, _one_line(e)))
                progress.advance(len(ids) * len(cell.seeds), failed=True)
                continue
            store.commit(cell.model, cell.file_stem, rec)
            result.ran += 1
            progress.advance(len(ids) * len(cell.seeds))
    progress.stop()
    result.elapsed_s = time.time() - start
    return result


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return first if isinstance(e, UserError) else f"{type(e).__module__}.{type(e).__name__}: {first}"


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
