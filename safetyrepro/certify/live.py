"""Live certification (`safetyrepro certify --models ...`): plan the run, resume it, certify, save it.

The sweep plans it: the same model specs, benchmarks, envelope filters, item subset (--limit N: the
first N items) and precision, validated before any model loads (SweepOptions, `Sweep.create`). The
oracle that runs the models is live_oracle.py; which earlier records it starts from, resume.py; what
items cost and what the run spent, cost.py. A rerun of the same command with the same --seed draws the
same items in the same order, and resumes from the folder's own records and the outputs cache.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from safetyrepro.analysis.cell_timing import cell_seconds_per_item
from safetyrepro.errors import UserError
from safetyrepro.sweep.cached_backend import outputs_cache_path
from safetyrepro.sweep.options import SweepOptions
from safetyrepro.sweep.outputs_cache import OutputsCache
from safetyrepro.sweep.plan import select_configs
from safetyrepro.sweep.sweeper import Sweep

from .algorithm import BenchmarkProblem, CertifyOptions, CertifyResult, certify
from .cost import certify_rates
from .live_oracle import LiveOracle
from .outputs import check_out, whole_set, write_outputs
from .ray_oracle import RayOracle
from .resume import check_resumable, earlier_source, earlier_weights, read_json, read_records, same_command, same_why

LIVE_ROUND_SECONDS = 600.0  # a live round's estimated cost: re-planned from what was learnt at least this often


def plan_live(sweep_options: SweepOptions, out: Path) -> Sweep:
    """The validated live run of `certify --models ...` (a planned Sweep), or a UserError before any model
    loads. `sweep_options`: the sweep's own (SweepOptions.from_args as certify's profile takes them)."""
    check_out(out)  # a sweep's, another command's or a user's files are never replaced
    sweep = Sweep.create(sweep_options)
    if len(sweep.spec.models) < 2:
        raise UserError("certify compares models pairwise: give at least two (--models A B ...)")
    return sweep


def run_live(
    sweep_options: SweepOptions,
    out: Path,
    options: CertifyOptions,
    say: Callable[[str], None] | None,
    records: Sequence[str | Path] = (),
    checkpoint_seconds: float = 600.0,
    selection: str = "none",
) -> tuple[CertifyResult, list[Path]]:
    """Plan, certify, write the outputs (under the folder's lock); (result, paths written). `records`:
    earlier items.parquet files (of sweeps or certify runs made the same way) whose items are taken as
    evaluated. The outputs are also written every `checkpoint_seconds` while the run goes on, and when
    it is interrupted, so a stopped run loses nothing a rerun would need."""
    check_resumable(out)
    sweep = plan_live(sweep_options, out)
    run = LiveRun(sweep, live_oracle(sweep_options, sweep, say, out / "logs"), out, say)
    earlier = [earlier_source(Path(r), sweep.spec) for r in records]  # every given file checked before any is read
    OutputsCache(outputs_cache_path()).check()  # a bad cache is found here, not after a model load
    sweep.store.lock()  # one run at a time writes the folder; what it resumes from is read under the lock
    try:
        run.oracle.start()
        run.start_from(earlier)
        problems = chosen_validly(run.problems, selection, run.looked_at, sweep_options)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        run.source = _source(sweep, problems)
        result = certify(
            problems,
            run.oracle,
            options,
            progress=say,
            checkpoint=run.checkpoint,
            checkpoint_seconds=checkpoint_seconds,
        )
        return result, run.write(result)
    finally:
        run.oracle.close()
        sweep.store.unlock()


def live_oracle(sweep_options: SweepOptions, sweep: Sweep, say, log_dir: Path) -> LiveOracle:
    """The oracle of `--executor local` (the models run in this process) or `ray` (ray_oracle.py)."""
    if sweep_options.executor == "ray":
        return RayOracle(sweep, say=say, log_dir=log_dir, address=sweep_options.address, workers=sweep_options.workers)
    return LiveOracle(sweep, say=say, log_dir=log_dir)


@dataclass
class LiveRun:
    """What a live run carries from its plan to its last write."""

    sweep: Sweep
    oracle: LiveOracle
    out: Path
    say: Callable[[str], None] | None
    looked_at: dict[str, set[str]] = field(default_factory=dict)  # config -> items of --records (a selection saw)
    source: str = ""  # the report's words for where the records came from

    def __post_init__(self) -> None:
        self.problems = self.oracle.problems()

    def start_from(self, earlier: list[tuple[Path, dict]]) -> None:
        """Take the folder's own records (a rerun of the same command resumes) and the given --records as
        evaluated; read under the folder's lock."""
        out, spec, say = self.out, self.sweep.spec, self.say
        previous = read_json(out / "cost.json") if whole_set(out) else None  # only a whole set is resumed
        check_resumable(out)  # again under the lock: another run may have written meanwhile
        own = out / "items.parquet"
        if isinstance(previous, dict) and own.is_file() and not own.is_symlink():
            if same_command(previous.get("live") or {}, spec):
                earlier.insert(0, (own, previous))
                self.oracle.costs.earlier_pieces = previous
            elif say is not None:
                say(
                    f"{own} is from another certify command ({same_why(previous.get('live') or {}, spec)}); "
                    "starting afresh"
                )
        items = {str(i) for q in self.problems for i in q.item_ids}
        for path, made in earlier:
            frame = read_records(path)
            if path != own:
                for cid, item in zip(frame["config_id"].astype(str), frame["item_id"].astype(str), strict=True):
                    self.looked_at.setdefault(cid, set()).add(item)
            n = self._keep(frame, items, path, made)
            if say is not None:
                say(
                    f"{'resuming' if path == own else 'earlier records'}: {n:,} (model, configuration, item) "
                    f"evaluations held after {path}"
                )

    def _keep(self, frame: pd.DataFrame, items: set[str], path: Path, made: dict) -> int:
        """Take one records file as evaluated, with the weights and the rates it was made with; returns the
        (model, configuration, item) evaluations held so far."""
        oracle = self.oracle
        n = oracle.keep_earlier(frame, items, str(path))
        for label, sha in earlier_weights(path.parent, made).items():
            oracle.earlier_weights.setdefault(label, {})[sha] = path
        if "sweep_folder" in made:
            rates = cell_seconds_per_item(path.parent)
            oracle.costs.sweep_rates.update({k: v for k, v in rates.items() if k in oracle.cells})
        else:
            oracle.costs.prior_rates.update(certify_rates(made))
        return n

    def write(self, result: CertifyResult) -> list[Path]:
        return write_outputs(result, self.out, self.oracle.records(), self.source, extra_cost=self.oracle.cost_extra())

    def checkpoint(self, result: CertifyResult) -> None:
        self.write(result)
        if self.say is not None:
            self.say(f"saved the run so far to {self.out} ({result.paired_evaluations:,} paired evaluations fed)")


def _source(sweep: Sweep, problems: tuple[BenchmarkProblem, ...]) -> str:
    spec = sweep.spec
    return (
        f"live evaluation of {', '.join(spec.models)} on {', '.join(spec.benchmarks)} through "
        f"{spec.package} ({spec.precision}, {sum(len(q.config_ids) for q in problems)} configurations"
        + (f", the first {spec.limit} items" if spec.limit else "")
        + ")"
    )


def chosen_validly(
    problems: tuple[BenchmarkProblem, ...], selection: str, looked_at: dict[str, set[str]], sweep_options: SweepOptions
) -> tuple[BenchmarkProblem, ...]:
    """The problems as a selection of configurations leaves them valid (docs/certify.md, *Chosen by
    looking*): `records` keeps the items the given records hold for each configuration out of its evidence;
    `family` puts every configuration of the chosen ones' benchmarks (tier and filters other than
    --configs) in the family alpha covers; `none` takes the configurations as fixed before any data."""
    if selection == "none":
        return problems
    if selection == "records":
        return tuple(
            dataclasses.replace(
                p, excluded={cid: frozenset(looked_at[cid]) for cid in p.config_ids if looked_at.get(cid)}
            )
            for p in problems
        )
    if selection != "family":
        raise ValueError(f"selection {selection!r}")
    o = sweep_options
    filters = {k: v for k, v in o.filters.items() if v and k != "config"}
    out = []
    for p in problems:
        every = select_configs(o.selection.rules, [p.benchmark], o.tier, o.selection.precision, filters)
        out.append(
            dataclasses.replace(
                p, family_configs=tuple(c.config_id for c in every if c.config_id not in set(p.config_ids))
            )
        )
    return tuple(out)
