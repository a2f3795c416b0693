"""`certify --executor ray`: the live oracle with each model held by a Ray worker (the sweep's `CellWorker`: one
model for its lifetime, loaded once), on a local Ray instance or a cluster (`--address`).

A round's calls go out together, each worker taking its model's calls in the round's order, so the models of a
configuration run at once; the records come back to this process, which keeps the sequences, the outputs and the
budget, so nothing needs a shared filesystem. Workers are spread over the nodes. A worker lost with its node is
restarted by Ray on another node (its model loaded again there) and the lost call run again: the answers are the
same wherever a model runs (the engine's outputs do not depend on the machine's load or on batch composition), so
the certificate is the local executor's wherever the allocation reads no timings (`--allocation uniform`, or rates
from earlier records). A time budget counts CPU seconds of model calls as measured by the worker that made them (its
process time), so it buys the same model work on a cluster as here; when a budget is set, calls go one at a time so
that none starts once it is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from safetyrepro.errors import UserError
from safetyrepro.sweep.cell import CellCall, CellSetup
from safetyrepro.sweep.ray_executor import start_ray, worker_class, worker_threads

from .live_oracle import LiveOracle
from .oracle import Request

RESTARTS = 3  # Ray restarts a lost worker on another node at most this often (then certify starts a new one)
LOAD_WAIT_S = 1800.0  # a worker's first load may join and convert the weights; past this it is not coming
LOST_WORKER_WAIT_S = 600.0  # how long a call waits for its lost worker to come back before the run stops


@dataclass
class RayOracle(LiveOracle):
    address: str | None = None
    workers: int = 2
    _started_here: bool = False
    _sent: dict = field(default_factory=dict)  # (model, config_id, item ids) -> the call's future

    def start(self) -> None:
        """Join the cluster, or start a local instance with a CPU for each model: every round asks every
        model, so all of them stay loaded, one worker of one CPU each."""
        import ray

        n = len(self.sweep.spec.models)
        self._started_here = start_ray(self.address, max(self.workers, n))
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < n:
            self.close()
            raise UserError(
                f"certify keeps all {n} models loaded, each on a Ray worker of one CPU; the cluster at "
                f"{self.address} has {cpus:g} CPUs: add nodes or certify fewer models at once"
            )

    def close(self) -> None:
        import ray

        for actor in self.drivers.values():
            ray.kill(actor)
        self.drivers.clear()
        if self._started_here:
            ray.shutdown()
            self._started_here = False

    def _open(self, model: str, setup: CellSetup) -> tuple[object, dict]:
        import ray

        actor = (
            worker_class()
            .options(num_cpus=1, max_restarts=RESTARTS, max_task_retries=RESTARTS, scheduling_strategy="SPREAD")
            .remote(self.sweep.entry(model), setup, self.sweep.prefetch_seeds(model), worker_threads(self.workers))
        )
        try:
            record, failure = ray.get(actor.opened.remote(), timeout=LOAD_WAIT_S)
        except ray.exceptions.GetTimeoutError:
            ray.kill(actor)
            raise UserError(
                f"{model}: no Ray worker was placed and loaded within {LOAD_WAIT_S / 60:.0f} minutes (each needs "
                "one free CPU on a node that can read the model)"
            ) from None
        if failure:
            ray.kill(actor)
            raise UserError(f"{model} failed to load: {failure}")
        return actor, record

    def _call(self, model: str, cell, item_ids: list[str]) -> CellCall:
        import ray

        key = (model, cell.config.config_id, tuple(item_ids))
        future = self._sent.pop(key, None)
        deadline = time.monotonic() + LOST_WORKER_WAIT_S
        while True:
            if future is None:
                future = self.driver(model).run_items.remote(cell, list(item_ids))
            try:
                return ray.get(future)
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError) as e:
                # the worker's node was lost: Ray restarts the worker elsewhere (a new one once its restarts
                # are used up) and the call runs again there
                if time.monotonic() > deadline:
                    raise
                if isinstance(e, ray.exceptions.ActorDiedError):
                    self.drivers.pop(model, None)
                self._say(f"{model}: its Ray worker was lost ({type(e).__name__}); running the call again")
                time.sleep(2)
                future = None
            except ray.exceptions.RayTaskError as e:  # the worker's own exception, not Ray's wrapping of it
                raise (e.cause if e.cause is not None else e) from None

    def evaluate_many(
        self,
        requests: Sequence[Request],
        seconds_left: float | None = None,
        tick: Callable[[], None] | None = None,
    ) -> list[np.ndarray]:
        """Without a time budget every call of the round is sent before the first answer is read (the
        workers run their models at once); the answers are then read in the round's order, as here."""
        if seconds_left is None:
            for _, cid, model, ids in requests:
                todo = [i for i in ids if not self._held(model, cid, i)]
                key = (model, cid, tuple(todo))
                if todo and key not in self._sent:
                    self._sent[key] = self.driver(model).run_items.remote(self.cells[(model, cid)], todo)
        try:
            return super().evaluate_many(requests, seconds_left, tick)
        finally:
            self._sent.clear()  # a call not read (an error stopped the round) is not reused
