"""`--executor ray`: cells fanned out over Ray actors, each holding one model.

Actors compute cell records and send them back; the driver process commits each one atomically into
the same store as the local executor, so resume, lock and output guarantees are the same, and a
cluster needs no shared filesystem. Without `--address` a local Ray instance is started.
"""

from __future__ import annotations

import os
import time
from typing import Any

from safetyrepro.sweep.cached_backend import open_cached_backend
from safetyrepro.sweep.drivers import backend_record, item_sets, make_driver
from safetyrepro.sweep.runner import (
    SweepResult,
    cell_item_ids,
    cell_record,
    commit_not_applicable,
    failed_record,
    pending_cells,
)
from safetyrepro.tasks.envelope import load_rules

_ENV_VARS = (
    "SAFETYREPRO_DATA_DIR",
    "SAFETYREPRO_CACHE_DIR",
    "SAFETYREPRO_OFFLINE",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "TOKENIZERS_PARALLELISM",
)


def _worker_class():
    import ray

    @ray.remote
    class CellWorker:
        """Holds one model for its lifetime and runs that model's cells."""

        def __init__(self, sweep_state: dict, entry, threads: int):
            try:
                import torch

                torch.set_num_threads(max(1, threads))
            except ImportError:  # a worker that only talks to API backends
                pass

            self.state = sweep_state
            self.rules = load_rules(sweep_state["rules"])
            self.items_for = item_sets(sweep_state["subsample"], sweep_state["subset_seed"], sweep_state["limit"])
            backend = open_cached_backend(
                entry, sweep_state["precision"], sweep_state["device"], sweep_state["batch_size"]
            )
            backend.prefetch_seeds = tuple(sweep_state["prefetch_seeds"][entry.label])
            self.record = backend_record(backend)
            self.driver = make_driver(
                sweep_state["package"],
                backend,
                self.rules,
                self.items_for,
                sweep_state["log_dir"],
                sweep_state["tie_rule"],
            )

        def info(self) -> dict:
            return self.record

        def run(self, cell, spec, ids):
            t0, c0 = time.time(), time.process_time()
            records = self.driver.run_cell(cell.config, cell.seeds, ids)
            items = self.items_for(cell.config.benchmark)
            return cell_record(
                cell, spec, self.rules, self.driver.identity, records, items, time.time() - t0, time.process_time() - c0
            )

    return CellWorker


def run_ray(sweep, progress) -> SweepResult:
    import ray

    spec, store, opts = sweep.spec, sweep.store, sweep.options
    pending = pending_cells(sweep.cells, store)
    result = SweepResult(total=len(sweep.cells), done_before=len(sweep.cells) - len(pending))
    progress.start(total=len(sweep.cells), done=result.done_before)
    pending = commit_not_applicable(pending, spec, sweep.rules, store, sweep.items_for, result, progress)
    if not pending:
        progress.stop()
        return result
    result.model_work = True
    started_here = not ray.is_initialized()
    if started_here:
        env = {k: os.environ[k] for k in _ENV_VARS if k in os.environ}
        kwargs = {"address": opts.address} if opts.address else {"num_cpus": max(opts.workers, 1)}
        ray.init(
            **kwargs,
            runtime_env={"env_vars": env},
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    t0 = time.time()
    try:
        worker_cls = _worker_class()
        threads = max(1, (os.cpu_count() or 2) // max(opts.workers, 1))
        state = {
            "rules": sweep.rules.path,
            "precision": spec.precision,
            "device": opts.device,
            "batch_size": opts.batch_size,
            "package": spec.package,
            "subsample": spec.subsample,
            "subset_seed": spec.subset_seed,
            "limit": spec.limit,
            "log_dir": str(store.root / "logs"),
            "tie_rule": spec.tie_rule,
            "prefetch_seeds": {m: sweep.prefetch_seeds(m) for m in spec.models},
        }
        queue = [m for m in spec.models if any(c.model == m for c in pending)]
        running: dict = {}  # future -> (actor, model, cell)
        actors: dict[str, Any] = {}  # Ray actor handles: their methods are made at run time

        def submit_next(model: str) -> None:
            todo = [c for c in pending if c.model == model]
            if not todo:
                return
            cell = todo[0]
            pending.remove(cell)
            ids = cell_item_ids(sweep.items_for(cell.config.benchmark), spec.limit)
            running[actors[model].run.remote(cell, spec, ids)] = (model, cell, len(ids) * len(cell.seeds))

        def start_model(model: str) -> None:
            actors[model] = worker_cls.options(num_cpus=1).remote(state, sweep.entry(model), threads)
            submit_next(model)

        while queue and len(actors) < max(1, opts.workers):
            start_model(queue.pop(0))
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            model, cell, n = running.pop(done[0])
            try:
                record = ray.get(done[0])
                if model not in sweep.models_run:
                    sweep.models_run[model] = ray.get(actors[model].info.remote())
                store.commit(cell.model, cell.file_stem, record)
                result.ran += 1
                progress.advance(n)
            except Exception as e:  # the actor failed to load the model, or the cell failed
                msg = _one_line(e)
                store.commit(cell.model, cell.file_stem, failed_record(cell, msg))
                result.failed.append((cell.key, msg))
                progress.advance(n, failed=True)
                if isinstance(e, ray.exceptions.ActorDiedError):  # the model never loaded (or its worker died)
                    for c in [c for c in pending if c.model == model]:
                        pending.remove(c)
                        store.commit(c.model, c.file_stem, failed_record(c, f"model failed to load: {msg}"))
                        result.failed.append((c.key, msg))
                        progress.advance(0, failed=True)
            if any(c.model == model for c in pending):
                submit_next(model)
            else:
                ray.kill(actors.pop(model))
                if queue:
                    start_model(queue.pop(0))
    finally:
        progress.stop()
        if started_here:
            ray.shutdown()
    result.elapsed_s = time.time() - t0
    return result


def _one_line(e: BaseException) -> str:
    lines = [x for x in str(e).strip().splitlines() if x.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:500]
