"""A sweep from validated arguments to grid.csv: checks first (nothing is written on bad input),
then the cells through the chosen executor, then the assembled outputs and a one-screen summary."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from safetyrepro.errors import UserError
from safetyrepro.sweep.plan import Cell, SweepSpec, plan_cells, select_configs
from safetyrepro.sweep.runner import SweepResult, run_local, write_run_json
from safetyrepro.sweep.store import Store
from safetyrepro.tasks.envelope import Rules, load_rules


def outputs_cache_path() -> Path:
    from safetyrepro.tasks.sources import cache_dir

    return cache_dir() / "outputs.sqlite"


def open_engine(model: str, precision: str, device: str | None, batch_size: int | None):
    """Load a model once and put the output cache in front of it, for every package in this process."""
    from safetyrepro.adapters.engine import install_engine, load_engine
    from safetyrepro.sweep.cached_engine import CachedEngine
    from safetyrepro.sweep.outputs_cache import OutputsCache

    engine = load_engine(model, precision, device, batch_size=batch_size)
    if isinstance(engine, CachedEngine):
        return engine
    cached = CachedEngine(engine, OutputsCache(outputs_cache_path()))
    install_engine(model, precision, device, cached)
    return cached


@dataclass
class Sweep:
    spec: SweepSpec
    rules: Rules
    cells: list[Cell]
    store: Store
    args: argparse.Namespace

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Sweep:
        from safetyrepro.adapters.loading import check_precision
        from safetyrepro.sweep.cli import check_model_name

        rules = load_rules(args.rules)
        for m in args.models:
            check_model_name(m)
        if len(set(args.models)) != len(args.models):
            raise UserError("a model is listed twice in --models")
        precision = check_precision(args.precision)
        benchmarks = list(args.benchmarks or rules.benchmarks)
        filters = {"template": args.templates, "decoding": args.decodings, "shots": args.shots, "scoring": args.scoring}
        configs = select_configs(rules, benchmarks, args.tier, precision, filters)
        if args.limit is not None and args.limit < 1:
            raise UserError(f"--limit must be a positive number of items, got {args.limit}")
        if args.subsample is not None and not 0 < args.subsample <= 1:
            raise UserError(f"--subsample must be a fraction in (0, 1], got {args.subsample}")
        spec = SweepSpec(tuple(args.models), tuple(benchmarks), args.tier, args.package, precision, args.limit,
                         rules.sha256, {k: v for k, v in filters.items() if v}, args.subsample, args.subset_seed)
        store = Store(Path(args.out))
        previous = store.check_identity(spec.identity(), args.allow_rules_change)  # before anything is written
        sweep = cls(spec, rules, plan_cells(list(args.models), configs, rules), store, args)
        sweep._previous = previous
        return sweep

    def items_for(self, benchmark: str):
        from safetyrepro.tasks.subsets import item_set

        return item_set(benchmark, subsample=self.spec.subsample, subsample_seed=self.spec.subset_seed)

    def open_driver(self, model: str):
        from safetyrepro.sweep.drivers import make_driver

        engine = open_engine(model, self.spec.precision, self.args.device, self.args.batch_size)
        sampled = {s for c in self.cells if c.model == model for s in c.seeds if len(c.seeds) > 1}
        engine.prefetch_seeds = tuple(sorted(sampled))
        self.engines[model] = engine.info.to_dict()
        return make_driver(self.spec.package, engine, self.rules, self.items_for, str(self.store.root / "logs"))

    def run(self) -> SweepResult:
        from safetyrepro.sweep.progress import SweepProgress

        self.store.lock()
        try:
            self.store.write_identity(self.spec.identity(), self._previous)
            self.engines: dict[str, dict] = {}
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            progress = SweepProgress(enabled=not self.args.no_progress)
            if self.args.executor == "ray":
                from safetyrepro.sweep.ray_executor import run_ray

                result = run_ray(self, progress)
            else:
                result = run_local(self.spec, self.cells, self.store, self.rules, self.open_driver, self.items_for,
                                   progress)
            result.outputs = self.store.write_outputs(self.store.records(), [c.key for c in self.cells])
            write_run_json(self.store, self.spec, self.rules, self.engines, self.items_for, result)
            return result
        finally:
            self.store.unlock()

    def print_summary(self, result: SweepResult) -> None:
        import pandas as pd
        from rich.console import Console

        console = Console(highlight=False, soft_wrap=True)
        grid = pd.read_csv(result.outputs["grid"])
        if not result.model_work:
            console.print(f"all {result.total} cells were already in {self.store.root}: no model work")
        console.print(f"[bold]sweep[/bold] {self.store.root}: {len(grid)} of {result.total} cells in the grid, "
                      f"{result.ran} run now, {result.done_before} resumed, {len(result.failed)} failed, "
                      f"{result.elapsed_s:.1f} s")
        if len(grid):
            table = grid.groupby(["model", "benchmark"]).agg(cells=("score", "size"), score_min=("score", "min"),
                                                           score_max=("score", "max"), parse_rate=("parse_rate", "mean"))
            console.print(table.round(3).to_string())
            low = grid[grid["parse_rate"] < 0.95]
            if len(low):
                console.print(f"{len(low)} cells have parse_rate < 0.95 (see the parse_clean slice in the analysis)")
        for key, err in result.failed[:10]:
            console.print(f"[red]failed[/red] {key}: {err}")
        if len(result.failed) > 10:
            console.print(f"... and {len(result.failed) - 10} more failed cells (listed in the cell files)")
        console.print(f"grid: {result.outputs['grid']}\nitems: {result.outputs['items']}\n"
                      f"run record: {self.store.root / 'run.json'}")
