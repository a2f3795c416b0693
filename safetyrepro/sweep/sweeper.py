"""A sweep from validated options to grid.csv: checks first (nothing is written on bad input),
then the cells through the chosen executor, then the assembled outputs and a one-screen summary."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from safetyrepro.adapters.catalogue.loading import check_loadable
from safetyrepro.adapters.catalogue.model_specs import ModelEntry, check_runnable
from safetyrepro.console import console as make_console
from safetyrepro.errors import UserError
from safetyrepro.sweep.cached_backend import outputs_cache_path
from safetyrepro.sweep.cell import CellRunner, CellSetup
from safetyrepro.sweep.options import SweepOptions
from safetyrepro.sweep.outputs_cache import OutputsCache
from safetyrepro.sweep.plan import Cell, SweepSpec, plan_cells
from safetyrepro.sweep.progress import SweepProgress
from safetyrepro.sweep.ray_executor import check_ray_address
from safetyrepro.sweep.runner import SweepResult, run_local, write_run_json
from safetyrepro.sweep.store import Store
from safetyrepro.tasks.envelope import Rules


@dataclass
class Sweep:
    options: SweepOptions
    spec: SweepSpec
    rules: Rules
    cells: list[Cell]
    store: Store
    models: tuple[ModelEntry, ...]  # the options' models as checked runnable (a server's abilities asked)
    previous: dict | None = None
    models_run: dict[str, dict] = field(default_factory=dict)  # label -> backend record for run.json

    @classmethod
    def create(cls, o: SweepOptions) -> Sweep:
        """The sweep the options ask for (checked when they were made), its models checked as far as they
        can be without loading one, and its folder read: nothing is written on bad input."""
        chosen = o.selection
        if o.executor == "ray":  # before the models' checks, which may join weights or ask a server
            try:
                import ray  # noqa: F401
            except ImportError:
                raise UserError("--executor ray needs Ray: pip install 'safetyrepro[ray]'") from None
            check_ray_address(o.address)  # seconds at most, where ray.init would retry for minutes
        scorings = {c.scoring for c in chosen.configs}
        explicit = "scoring" in chosen.filters
        models = tuple(check_runnable(m, o.package, scorings, explicit_scoring=explicit) for m in o.models)
        check_loadable(models, o.device)
        spec = o.spec()
        store = Store(Path(o.out))
        store.check_identity(spec.identity(), o.allow_rules_change)  # early, read-only; again under the lock
        store.check_run_record()
        store.check_links()
        return cls(o, spec, chosen.rules, plan_cells(list(models), chosen.configs, chosen.rules), store, models)

    def entry(self, label: str) -> ModelEntry:
        return next(m for m in self.models if m.label == label)

    def items_for(self, benchmark: str):
        return self.setup().items_for(benchmark)

    def prefetch_seeds(self, label: str) -> tuple[int, ...]:
        return tuple(sorted({s for c in self.cells if c.model == label for s in c.seeds if len(c.seeds) > 1}))

    def setup(self, log_dir: str | None = None) -> CellSetup:
        """What running this sweep's cells takes besides a model (the packages' logs in `log_dir`)."""
        return CellSetup(self.spec, self.rules, self.options.device, self.options.batch_size, log_dir)

    def log_dir(self) -> str:
        return str(self.store.root / "logs")

    def runner(self, label: str) -> CellRunner:
        """The local executor's model, opened for its cells (run.json records its backend)."""
        runner = CellRunner(self.entry(label), self.setup(self.log_dir()), self.prefetch_seeds(label))
        if runner.model is not None:
            self.models_run[label] = runner.record()
        return runner

    def run(self) -> SweepResult:
        if any(c.applicable for c in self.cells):  # a bad cache is found here, not after a model load
            OutputsCache(outputs_cache_path()).check()
        self.store.lock()
        try:
            # under the lock: a sweep that finished meanwhile with other settings is seen here
            self.previous = self.store.check_identity(self.spec.identity(), self.options.allow_rules_change)
            self.store.write_identity(self.spec.identity(), self.previous)
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            progress = SweepProgress(enabled=self.options.progress)
            if self.options.executor == "ray":
                from safetyrepro.sweep.ray_executor import (
                    run_ray,  # lazy: Ray loads only with --executor ray
                )

                result = run_ray(self, progress)
            else:
                result = run_local(self.setup(self.log_dir()), self.cells, self.store, self.runner, progress)
            result.outputs = self.store.write_outputs(self.store.records(), [c.key for c in self.cells])
            write_run_json(self.store, self.spec, self.rules, self.models_run, self.items_for, result)
            return result
        except BaseException:  # a refusal or a stop: no lock file or half-made --out is left, cells are kept
            self.store.abandon()
            raise
        finally:
            self.store.unlock()

    def print_summary(self, result: SweepResult) -> None:
        import pandas as pd

        console = make_console(highlight=False, soft_wrap=True)
        grid = pd.read_csv(result.outputs["grid"])
        if not result.model_work:
            console.print(f"all {result.total} cells were already in {self.store.root}: no model work")
        na = int((grid["status"] == "not_applicable").sum()) if "status" in grid else 0
        console.print(
            f"[bold]sweep[/bold] {self.store.root}: {len(grid)} of {result.total} cells in the grid, "
            f"{result.ran} run now, {result.done_before} resumed, {len(result.failed)} failed"
            + (f", {na} not applicable" if na else "")
            + f", {result.elapsed_s:.1f} s"
        )
        ok = grid[grid["status"] == "ok"] if "status" in grid else grid
        if len(ok):
            table = ok.groupby(["model", "benchmark"]).agg(
                cells=("score", "size"),
                score_min=("score", "min"),
                score_max=("score", "max"),
                parse_rate=("parse_rate", "mean"),
            )
            console.print(table.round(3).to_string())
            low = ok[ok["parse_rate"] < 0.95]
            if len(low):
                console.print(f"{len(low)} cells have parse_rate < 0.95 (see the parse_clean slice in the analysis)")
        if na:
            models = ", ".join(sorted(set(grid.loc[grid["status"] == "not_applicable", "model"])))
            console.print(f"{na} logprob cells are not applicable (no continuation log-likelihoods): {models}")
        for key, err in result.failed[:10]:
            console.print(f"[red]failed[/red] {key}: {err}")
        if len(result.failed) > 10:
            console.print(f"... and {len(result.failed) - 10} more failed cells (listed in the cell files)")
        console.print(
            f"grid: {result.outputs['grid']}\nitems: {result.outputs['items']}\n"
            f"run record: {self.store.root / 'run.json'}"
        )
