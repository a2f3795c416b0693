"""Live certification (`safetyrepro certify live --models ...`): plan the run, resume it, certify, save it.

The sweep plans it: the same model specs, benchmarks, envelope filters, item subset (--limit N: the
first N items) and precision, validated before any model loads (SweepOptions, `Sweep.create`). The
oracle that runs the models is live_oracle.py; which earlier records it starts from, resume.py; what
items cost and what the run spent, cost.py. A rerun of the same command with the same --seed draws the
same items in the same order, and resumes from the folder's own records and the outputs cache.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from safetyrepro.errors import UserError
from safetyrepro.grid.cell_timing import cell_seconds_per_item
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
    """The validated live run of `certify live --models ...` (a planned Sweep), or a UserError before any model
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
    selection: str | None = "none",
) -> tuple[CertifyResult, list[Path]]:
    """Plan, certify, write the outputs (under the folder's lock); (result, paths written). `records`:
    earlier items.parquet files (of sweeps or certify runs made the same way) whose items are taken as
    evaluated. `selection`: how --configs were chosen (chosen_validly), or None when the user did not say:
    then hand-picked configurations whose records this run can see are refused (selection_said). The
    outputs are also written every `checkpoint_seconds` while the run goes on, and when it is interrupted,
    so a stopped run loses nothing a rerun would need."""
    check_resumable(out)
    sweep = plan_live(sweep_options, out)
    run = LiveRun(sweep, live_oracle(sweep_options, sweep, say, out / "logs"), out, say)
    earlier = [earlier_source(Path(r), sweep.spec) for r in records]  # every given file checked before any is read
    cache = OutputsCache(outputs_cache_path())
    cache.check()  # a bad cache is found here, not after a model load
    sweep.store.lock()  # one run at a time writes the folder; what it resumes from is read under the lock
    try:
        run.oracle.start()
        run.start_from(earlier)
        # what the outputs cache says a sweep or certify run evaluated of this run's cells and items, less
        # this folder's own records (a rerun's own work is no selection)
        hand_picked = bool(sweep_options.filters.get("config"))
        seen = seen_in_cache(cache, run.oracle.cells, run.problems, run.own_items) if hand_picked else {}
        selection = selection_said(selection, hand_picked, bool(records), seen, cache.path, run.resumed)
        if selection == "records":  # what the cache holds was looked at too: kept out of the evidence
            for cid, items in seen.items():
                run.looked_at.setdefault(cid, set()).update(items)
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
    except BaseException:
        # a refusal or a failure under the lock takes back what the run made and kept no work in: no lock file
        # left to block the next command, no --out folder it created (what the folder held before is kept)
        sweep.store.abandon()
        raise
    finally:
        run.oracle.close()
        sweep.store.unlock()  # nothing left to do after abandon


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
    resumed: bool = False  # the folder held this command's earlier run: its configurations were chosen then
    own_items: set[tuple[str, str, str]] = field(default_factory=set)  # (model, config, item) of the folder's records
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
            if not same_command(previous.get("live") or {}, spec):
                # its records cannot serve this run, and writing this run's outputs would replace them
                raise UserError(
                    f"{out} holds another certify command's run ({same_why(previous.get('live') or {}, spec)}): "
                    f"this run would replace its {len(read_records(own)):,} records; give a new --out, or move "
                    f"{out} away first to keep them"
                )
            earlier.insert(0, (own, previous))
            self.oracle.costs.earlier_pieces = previous
            self.resumed = True
        items = evaluable_items(self.problems)  # a rerun keeps its partner items
        for path, made in earlier:
            frame = read_records(path)
            if path != own:
                for cid, item in zip(frame["config_id"].astype(str), frame["item_id"].astype(str), strict=True):
                    self.looked_at.setdefault(cid, set()).add(item)
            n = self._keep(frame, items, path, made)
            if path == own:
                self.oracle.carried = frame  # the records this run does not use are written back unchanged
                self.own_items = set(
                    zip(
                        frame["model"].astype(str),
                        frame["config_id"].astype(str),
                        frame["item_id"].astype(str),
                        strict=True,
                    )
                )
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
    """The problems as a selection of configurations leaves them valid (docs/methods/certify.md, *Chosen by
    looking*): `records` keeps the items the given records hold for each configuration out of its evidence;
    `family` puts every configuration of the chosen ones' benchmarks (tier and filters other than
    --configs) in the family alpha covers; `none` takes the configurations as fixed before any data."""
    if selection == "none":
        return problems
    if selection == "records":
        out = []
        for p in problems:
            excluded = {cid: frozenset(looked_at[cid]) for cid in p.config_ids if looked_at.get(cid)}
            # an item whose scores chose the configurations would bias the twin's partner scores too
            seen = frozenset().union(*excluded.values())
            pool = tuple(i for i in p.pool if i not in seen)
            out.append(dataclasses.replace(p, excluded=excluded, pool=pool))
        return tuple(out)
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


SELECTION_VALUES = (
    "say how they were chosen with --selection none (fixed before any data was seen), records (by looking at "
    "those records: their items are not used as evidence) or family (from the whole envelope the other flags "
    "select: alpha covers all of it)"
)


def evaluable_items(problems: tuple[BenchmarkProblem, ...]) -> set[str]:
    """Every item a run may evaluate: its subsets' and the pools beyond them that its twins score as partners."""
    return {str(i) for p in problems for i in (*p.item_ids, *p.pool)}


def seen_in_cache(
    cache: OutputsCache,
    cells: Iterable[tuple[str, str]],
    problems: tuple[BenchmarkProblem, ...],
    own: set[tuple[str, str, str]],
) -> dict[str, set[str]]:
    """config -> the items of this run's subset and of its pool beyond it (the twins' partner items) that the
    outputs cache says some sweep or certify run evaluated on it (for any of this run's models), less the folder's
    own records `own`. Items outside both are left out: looking at them biases no evidence."""
    items = evaluable_items(problems)
    seen: dict[str, set[str]] = {}
    for model, cid in cells:
        found = {i for i in cache.items_noted(model, cid) & items if (model, cid, i) not in own}
        if found:
            seen.setdefault(cid, set()).update(found)
    return seen


def selection_said(
    selection: str | None,
    hand_picked: bool,
    records_given: bool,
    seen: dict[str, set[str]],
    cache_path: Path,
    resumed: bool = False,
) -> str:
    """The selection a run uses, or a one-line refusal (docs/methods/certify.md, *Chosen by looking*). Hand-picked
    --configs whose records the run can see (--records, or the outputs cache a sweep or an earlier certify
    run filled: `seen`) must say how they were chosen: a live `certify --configs X` picked after a look at
    `sweep --limit 15` and run as `none` draws those first items again as evidence (false claims in 41 of
    100 simulated worlds, issue 53). A rerun of the same command (`resumed`) keeps the choice its first run
    made."""
    if selection is None:
        if hand_picked and records_given:
            raise UserError(f"--configs with --records: {SELECTION_VALUES}")
        if hand_picked and seen and not resumed:
            cid = sorted(seen)[0]
            more = f" and {len(seen) - 1} more of --configs" if len(seen) > 1 else ""
            raise UserError(
                f"--configs: the outputs cache {cache_path} holds records of {cid} on {len(seen[cid]):,} of this "
                f"run's items{more} (a sweep or an earlier certify run evaluated them), so the configurations "
                f"may have been chosen by looking; {SELECTION_VALUES}"
            )
        return "none"
    if selection == "records" and not records_given and not seen:
        raise UserError(
            "--selection records: no records of these configurations were seen (none in --records or the outputs "
            f"cache {cache_path}); name the records they were chosen from with --records"
        )
    return selection
