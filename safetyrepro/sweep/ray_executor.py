"""`--executor ray`: cells fanned out over Ray actors, each holding one model.

Actors compute cell records and send them back; the driver process commits each one atomically into
the same store as the local executor, so resume, lock and output guarantees are the same, and a
cluster needs no shared filesystem. Without `--address` a local Ray instance is started.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from safetyrepro.errors import UserError, error_line
from safetyrepro.sweep.cell import LOAD_FAILED, CellRunner, CellSetup, disk_full, failed_record
from safetyrepro.sweep.plan import Cell
from safetyrepro.sweep.runner import SweepResult, commit, commit_not_applicable, pending_cells

_ENV_VARS = (
    "SAFETYREPRO_DATA_DIR",
    "SAFETYREPRO_CACHE_DIR",
    "SAFETYREPRO_OFFLINE",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "TOKENIZERS_PARALLELISM",
)


RAY_CONNECT_TIMEOUT_S = 5.0  # the cluster's port must answer within this; Ray itself retries for minutes
RAY_CLIENT_PORT = 10001  # Ray's default for a `ray://HOST` address without a port


def ray_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) that a `--address` names (HOST:PORT, [IPv6]:PORT, ray://HOST[:PORT]), or None for
    the addresses Ray resolves itself (`auto`, `local`); a UserError for one Ray could not read."""
    if address in ("auto", "local"):
        return None
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://").rstrip("/")
    host, colon, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if not colon and client:
        host, port = rest, str(RAY_CLIENT_PORT)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(
            f"--address {address!r} is not a Ray address: give HOST:PORT (the head node's GCS port, 6379 "
            "unless `ray start --port` chose another), ray://HOST:PORT (Ray Client) or auto"
        )
    return host, int(port)


def check_ray_address(address: str | None, timeout: float | None = None) -> None:
    """Refuse an address where no Ray cluster listens, before the sweep makes its folder: a TCP connect
    to its port and, for a GCS address, a gRPC greeting, each bounded by `timeout` (default
    RAY_CONNECT_TIMEOUT_S; ray.init would retry for minutes, printing a line every few seconds). Without
    an address a local instance is started: nothing to reach."""
    if not address:
        return
    if address == "auto":  # ray.init reads RAY_ADDRESS for it; else it finds a cluster on this machine
        address = os.environ.get("RAY_ADDRESS") or address
    endpoint = ray_endpoint(address)
    if endpoint is None:
        return
    host, port = endpoint
    timeout = RAY_CONNECT_TIMEOUT_S if timeout is None else timeout
    # a head node's GCS speaks gRPC: it answers HTTP/2's preface with a SETTINGS frame (over TLS it would
    # not, and Ray Client's server is not asked: for those, that the port takes a connection is enough)
    grpc = not address.startswith("ray://") and os.environ.get("RAY_USE_TLS", "0") in ("", "0")
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            answer = _http2_answer(s, timeout) if grpc else None
    except OSError as e:  # refused, unreachable, a name that does not resolve, or silence until the timeout
        why = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise UserError(
            f"no Ray cluster answers at --address {address} ({why}); start it "
            f"(ray start --head --port {port}) or fix the address, or leave out --address to start a local "
            "Ray instance, or use --executor local"
        ) from None
    if answer is not None and not (len(answer) == 9 and answer[3] == _SETTINGS):
        dashboard = " (8265 is the Ray dashboard's port, not the cluster's)" if port == 8265 else ""
        raise UserError(
            f"something listens at --address {address}, but not a Ray cluster's GCS{dashboard}: give the head "
            "node's address as `ray start --head` printed it (port 6379 unless --port chose another), "
            "or ray://HOST:10001 for Ray Client"
        )


_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)  # and an empty SETTINGS frame
_SETTINGS = 0x04  # the frame type a gRPC server opens with


def _http2_answer(s: socket.socket, timeout: float) -> bytes:
    """The first 9 bytes (a frame header) the server sends after HTTP/2's client preface (fewer if it closes)."""
    s.settimeout(timeout)
    s.sendall(_PREFACE)
    head = b""
    while len(head) < 9:
        chunk = s.recv(9 - len(head))
        if not chunk:
            break
        head += chunk
    return head


def start_ray(address: str | None, workers: int) -> bool:
    """Connect to the cluster at `address`, or start a local Ray instance of `workers` CPUs; True when this
    call started it (the caller shuts it down). The workers get the data, cache and offline settings."""
    import ray

    if ray.is_initialized():
        return False
    env = {k: os.environ[k] for k in _ENV_VARS if k in os.environ}
    # "local": a fresh instance, never one a `ray start` on this machine left behind (which ray.init() would join)
    kwargs = {"address": address} if address else {"address": "local", "num_cpus": max(workers, 1)}
    try:
        ray.init(
            **kwargs,
            runtime_env={"env_vars": env},
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as e:  # Ray's words, as one line
        where = f"the Ray cluster at --address {address}" if address else "a local Ray instance"
        raise UserError(
            f"cannot start or reach {where}: {error_line(e, with_type=False, most=300).rstrip('.')}; check the cluster "
            "(ray status), or use --executor local"
        ) from None
    return True


def worker_threads(workers: int) -> int:
    """Torch threads per worker: this machine's cores shared by the workers."""
    return max(1, (os.cpu_count() or 2) // max(workers, 1))


class CellWorker(CellRunner):
    """Holds one model for its lifetime and runs that model's cells, as the local executor does. A disk that
    fills while the model loads stops the whole run there too: the worker keeps the refusal and hands it back
    with each cell's record (`stop`), since an actor whose __init__ raised reaches the driver only as a died
    actor with a remote traceback."""

    def __init__(self, entry, setup: CellSetup, prefetch_seeds: tuple[int, ...], threads: int):
        try:
            import torch

            torch.set_num_threads(max(1, threads))
        except ImportError:  # a worker that only talks to API backends
            pass
        self.stop: str | None = None
        try:
            super().__init__(entry, setup, prefetch_seeds)
        except UserError as e:
            if disk_full(e) is None:
                raise
            self.model, self.load_failure, self.stop = None, str(e), str(e)

    def run(self, cell: Cell) -> dict:
        record = super().run(cell)
        return {**record, "stop": self.stop} if self.stop else record


def stop_if_refused(record: dict) -> None:
    """Raise the refusal a worker handed back with a cell's record (CellWorker): the run ends there, that
    cell uncommitted."""
    if record.get("stop"):
        raise UserError(record["stop"])


def worker_class():
    import ray

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
            stop_if_refused(record)
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
