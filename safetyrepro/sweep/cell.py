"""Running one cell, the one way the local executor, the Ray workers and certify's oracle all do it: open
a model once (its backend behind the outputs cache, and the package's driver), run cells through it, and
turn a cell into its record, or a failure into the one line its cell file and grid.csv keep.

A model is opened once and runs its cells through a `CellRunner`; the local executor holds one at a time,
and each Ray worker is one, sent the model entry and the frozen `CellSetup` (the sweep's spec and rules,
the device, the batch size and the log folder). So a cell's record, and a failed cell's text, are the
same whichever executor ran it.
"""

from __future__ import annotations

import errno
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from safetyrepro.adapters.backends.factory import open_backend
from safetyrepro.atomic import ensure_dir
from safetyrepro.cache_root import CACHE_DIR_ENV, cache_root
from safetyrepro.errors import UserError, error_line
from safetyrepro.grid_schema import grid_row
from safetyrepro.provenance import source_commit
from safetyrepro.sweep.cached_backend import CachedBackend, outputs_cache_path
from safetyrepro.sweep.drivers import _Driver, backend_record, item_sets, make_driver
from safetyrepro.sweep.outputs_cache import OutputsCache, OutputsCacheError
from safetyrepro.sweep.plan import Cell, SweepSpec
from safetyrepro.sweep.records import summarize
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import Rules
from safetyrepro.tasks.subsets import ItemSet

LOAD_FAILED = "model failed to load: "


@dataclass(frozen=True)
class CellSetup:
    """What running a model's cells takes besides the model: the sweep's spec and rules, the device and
    batch size, and the folder the packages write their logs in (None: lm-eval writes none; Inspect needs
    one)."""

    spec: SweepSpec
    rules: Rules
    device: str | None = None
    batch_size: int | None = None
    log_dir: str | None = None

    def items_for(self, benchmark: str) -> ItemSet:
        return item_sets(self.spec.subsample, self.spec.subset_seed, self.spec.limit)(benchmark)

    def item_ids(self, benchmark: str) -> list[str]:
        """The ids of the items a cell of `benchmark` scores (the first --limit of its item set)."""
        return cell_item_ids(self.items_for(benchmark), self.spec.limit)


@dataclass
class OpenModel:
    """One model, opened once for its cells: the package's driver over the cached backend, and the
    backend's record for run.json."""

    driver: _Driver
    record: dict = field(default_factory=dict)

    @property
    def backend(self) -> CachedBackend:
        return self.driver.backend  # type: ignore[return-value]  # open_model puts the cache in front


def cached_backend(entry, precision: str, device: str | None, batch_size: int | None) -> CachedBackend:
    """A model entry's backend, loaded, behind the outputs cache every sweep shares (a rerun asks it nothing
    it answered before): for the five benchmarks' cells, and for `sweep --task`'s runs."""
    return CachedBackend(open_backend(entry, precision, device, batch_size), OutputsCache(outputs_cache_path()))


def open_model(entry, setup: CellSetup, prefetch_seeds: tuple[int, ...] = ()) -> OpenModel:
    """Load a model's backend once, put the outputs cache in front of it (a sampled request prefetches
    `prefetch_seeds`, its sibling seeds) and open the package's driver over it."""
    spec = setup.spec
    backend = cached_backend(entry, spec.precision, setup.device, setup.batch_size)
    backend.prefetch_seeds = tuple(prefetch_seeds)
    if setup.log_dir is not None:  # the packages write their logs in it (in the run's own folder)
        ensure_dir(setup.log_dir, root=Path(setup.log_dir).parent)
    driver = make_driver(
        spec.package, backend, setup.rules, setup.items_for, setup.log_dir, spec.tie_rule, spec.fewshot_draw
    )
    return OpenModel(driver, backend_record(backend))


def run_cell(model: OpenModel, cell: Cell, setup: CellSetup) -> dict:
    """Run every seed of `cell` on its items and return its record (an exception propagates: the
    caller records it with `errors.error_line`)."""
    items = setup.items_for(cell.config.benchmark)
    ids = cell_item_ids(items, setup.spec.limit)
    call = call_cell(model.driver, cell, ids)
    return cell_record(
        cell, setup.spec, setup.rules, model.driver.identity, call.records, items, call.seconds, call.cpu_seconds
    )


@dataclass(frozen=True)
class CellCall:
    """One call of a cell's seeds on some of its items (certify's oracle asks a few items at a time): the
    records, the call's wall and CPU seconds (the CPU of the process that ran it, every thread), and whether
    the model ran (False: every output came from the outputs cache)."""

    records: list
    seconds: float
    cpu_seconds: float
    worked: bool


def call_cell(driver: _Driver, cell: Cell, item_ids) -> CellCall:
    """Run every seed of `cell` on `item_ids` (an exception propagates)."""
    backend: CachedBackend = driver.backend  # type: ignore[assignment]  # open_model puts the cache in front
    calls = backend.model_calls
    t0, c0 = time.monotonic(), time.process_time()
    records = driver.run_cell(cell.config, cell.seeds, list(item_ids))
    cache = getattr(backend, "cache", None)  # a stand-in driver in tests has none
    if cache is not None:  # a later certify run asks which cells' records were seen (issue 53)
        cache.note_items(cell.model, cell.config.config_id, item_ids)
    return CellCall(records, time.monotonic() - t0, time.process_time() - c0, backend.model_calls > calls)


def disk_full(e: BaseException | None) -> OSError | None:
    """The full-disk OSError (ENOSPC, EDQUOT) behind `e`: itself, or one it was raised from or while
    handling (a loader that words it as its own error keeps it as the context)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def disk_full_error(label: str, e: OSError) -> UserError:
    """A model that could not load because a disk it writes to while loading (the cache's converted or
    joined weights) is full, as one line naming the full folder and the fix: the cache folder
    (SAFETYREPRO_CACHE_DIR moves it), or the folder of the file that could not be written where that is
    elsewhere (a hub download). The run stops with it: every later model would fail alike."""
    root = cache_root()
    path = Path(str(e.filename)) if e.filename else None
    in_cache = path is None or path == root or root in path.parents
    where = f"the cache folder {root}" if in_cache else str(path.parent)  # type: ignore[union-attr]
    fix = "free space there" + (f", or set {CACHE_DIR_ENV} to a folder on a disk with room" if in_cache else "")
    return UserError(
        f"model {label!r} cannot load: no space left on the disk of {where}"
        + (f" (writing {path})" if path is not None and path != root else "")
        + f"; {fix}, and rerun the same command (finished cells are kept)"
    )


class CellRunner:
    """One model, opened once, running its cells one by one: the local executor holds one at a time, and
    each Ray worker is one. A model that fails to load fails each of its cells with the same line
    (LOAD_FAILED and the error's line); a cell that fails is recorded with `errors.error_line`; a broken
    outputs cache, or a disk filling while a model loads (disk_full_error), stops the run instead (every
    later cell, or model, would fail the same way)."""

    def __init__(self, entry, setup: CellSetup, prefetch_seeds: tuple[int, ...] = ()):
        self.setup = setup
        self.model: OpenModel | None = None
        self.load_failure: str | None = None
        try:
            self.model = open_model(entry, setup, prefetch_seeds)
        except OutputsCacheError:
            raise
        except Exception as e:  # a model that cannot load fails its cells, not the run
            full = disk_full(e)
            if full is not None:  # ... unless a full disk stops it: every later model would fail alike
                raise disk_full_error(entry.label, full) from None
            self.load_failure = error_line(e)

    def record(self) -> dict:
        """run.json's record of the model's backend (empty when it did not load)."""
        return {} if self.model is None else self.model.record

    def opened(self) -> tuple[dict, str | None]:
        """(the backend's record, the load failure's line or None): what a Ray worker reports once loaded."""
        return self.record(), self.load_failure

    def run_items(self, cell: Cell, item_ids) -> CellCall:
        """Some of the cell's items (certify): a model that did not load raises its load failure."""
        if self.model is None:
            raise RuntimeError(LOAD_FAILED + str(self.load_failure))
        return call_cell(self.model.driver, cell, item_ids)

    def run(self, cell: Cell) -> dict:
        """The cell's record, ok or failed."""
        if self.model is None:
            return failed_record(cell, LOAD_FAILED + str(self.load_failure))
        try:
            return run_cell(self.model, cell, self.setup)
        except OutputsCacheError:
            raise
        except Exception as e:
            # the traceback with -v (the CLI sets INFO logging); the cell's one line either way
            logging.getLogger(__name__).info("%s failed", cell.key, exc_info=True)
            return failed_record(cell, error_line(e))


def cell_item_ids(items: ItemSet, limit: int | None) -> list[str]:
    return [it.id for it in (items.items[:limit] if limit else items.items)]


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
