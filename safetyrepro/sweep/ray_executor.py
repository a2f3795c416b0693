"""`--executor ray`: cells fanned out over Ray actors, each holding one model.

Actors compute cell records and send them back; the driver process commits each one atomically into
the same store as the local executor, so resume, lock and output guarantees are the same, and a
cluster needs no shared filesystem. Without `--address` a local Ray instance is started.
"""

from __future__ import annotations

import os
import time
from typing import Any

from safetyrepro.errors import error_line
from safetyrepro.sweep.cell import LOAD_FAILED, CellRunner, CellSetup, failed_record
from safetyrepro.sweep.runner import SweepResult, commit, commit_not_applicable, pending_cells

_ENV_VARS = (
    "SAFETYREPRO_DATA_DIR",
    "SAFETYREPRO_CACHE_DIR",
    "SAFETYREPRO_OFFLINE",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "TOKENIZERS_PARALLELISM",
)


def start_ray(address: str | None, workers: int) -> bool:
    """Connect to the cluster at `address`, or start a local Ray instance of `workers` CPUs; True when this
    call started it (the caller shuts it down). The workers get the data, cache and offline settings."""
    import ray

    if ray.is_initialized():
        return False
    env = {k: os.environ[k] for k in _ENV_VARS if k in os.environ}
    # "local": a fresh instance, never one a `ray start` on this machine left behind (which ray.init() would join)
    kwargs = {"address": address} if address else {"address": "local", "num_cpus": max(workers, 1)}
    ray.init(
        **kwargs,
        runtime_env={"env_vars": env},
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    return True


def worker_threads(workers: int) -> int:
    """Torch threads per worker: this machine's cores shared by the workers."""
    return max(1, (os.cpu_count() or 2) // max(workers, 1))


def worker_class():
    import ray

    class CellWorker(CellRunner):
        """Holds one model for its lifetime and runs that model's cells, as the local executor does."""

        def __init__(self, entry, setup: CellSetup, prefetch_seeds: tuple[int, ...], threads: int):
            try:
                import torch

                torch.set_num_threads(max(1, threads))
            except ImportError:  # a worker that only talks to API backends
                pass
            super().__init__(entry, setup, prefetch_seeds)

    return ray.remote(CellWorker)


def run_ray(sweep, progress) -> SweepResult:
    import ray

    spec, store, opts = sweep.spec, sweep.store, sweep.options
    setup = sweep.setup(sweep.log_dir())
    pending = pending_cells(sweep.cells, store)
    result = SweepResult(total=len(sweep.cells), done_before=len(sweep.cells) - len(pending))
    progress.start(total=len(sweep.cells), done=result.done_before)
    pending = commit_not_applicable(pending, setup, store, result, progress)
    if not pending:
        progress.stop()
        return result
    result.model_work = True
    started_here = start_ray(opts.address, opts.workers)
    t0 = time.time()
    try:
        worker_cls = worker_class()
        threads = worker_threads(opts.workers)
        queue = [m for m in spec.models if any(c.model == m for c in pending)]
        running: dict = {}  # future -> (model, cell, item answers)
        actors: dict[str, Any] = {}  # Ray actor handles: their methods are made at run time

        def submit_next(model: str) -> None:
            todo = [c for c in pending if c.model == model]
            if not todo:
                return
            cell = todo[0]
            pending.remove(cell)
            n = len(setup.item_ids(cell.config.benchmark)) * len(cell.seeds)
            running[actors[model].run.remote(cell)] = (model, cell, n)

        def start_model(model: str) -> None:
            actors[model] = worker_cls.options(num_cpus=1).remote(
                sweep.entry(model), setup, sweep.prefetch_seeds(model), threads
            )
            submit_next(model)

        while queue and len(actors) < max(1, opts.workers):
            start_model(queue.pop(0))
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            model, cell, n = running.pop(done[0])
            died = False
            try:
                record = ray.get(done[0])
                if model not in sweep.models_run:
                    info = ray.get(actors[model].record.remote())
                    if info:
                        sweep.models_run[model] = info
            except Exception as e:  # the worker itself died (killed, out of memory), or the outputs cache broke
                record = failed_record(cell, error_line(_cause(e)))
                died = isinstance(e, ray.exceptions.ActorDiedError)
            commit(store, result, progress, record, cell, n)
            if died:  # no later cell of the model can run there
                for c in [c for c in pending if c.model == model]:
                    pending.remove(c)
                    commit(store, result, progress, failed_record(c, LOAD_FAILED + record["error"]), c, 0)
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


def _cause(e: BaseException) -> BaseException:
    """The exception a Ray task raised, unwrapped from Ray's (whose text is a remote traceback)."""
    import ray

    return e.cause if isinstance(e, ray.exceptions.RayTaskError) and e.cause is not None else e
