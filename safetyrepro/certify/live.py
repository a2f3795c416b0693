"""Live certification (`safetyrepro certify --models ...`): the oracle runs the models.

The sweep plans it: the same model specs, benchmarks, envelope filters, item subset (--limit N: the
first N items) and precision, validated by `Sweep.create` before any model loads. For (benchmark,
configuration, model, item ids) the oracle runs that cell through the model the sweep opens
(`sweep/cell.py` `open_model`: the package's driver on the cached backend; `run_cell(config, seeds,
item_ids)`: lm-eval's `simple_evaluate` or Inspect's `eval` on exactly those items, every seed of a
sampled configuration), and returns each item's mean item_score over the seeds: the
sweep's prompts, scoring functions and records, item for item. Every generation and log-likelihood goes
through the outputs cache shared with `sweep`, so an item evaluated before (by a sweep or by an earlier
certify run) costs nothing; a rerun of the same command with the same --seed draws the same items in the
same order and so resumes from the cache.

Models are loaded lazily, once, and kept for the run (the engine keeps them for the process, as a
sweep's local executor does); the algorithm hands the oracle a round's requests together
(`evaluate_many`), which are run model by model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.analysis.grid_io import read_table
from safetyrepro.analysis.item_validation import checked_records
from safetyrepro.analysis.significance import ITEM_COLUMNS
from safetyrepro.console import Heartbeat, duration
from safetyrepro.errors import UserError, error_line
from safetyrepro.limits import MAX_CONFIG_BYTES, read_capped, shorten
from safetyrepro.sweep.cached_backend import outputs_cache_path
from safetyrepro.sweep.cell import cell_item_ids, open_model
from safetyrepro.sweep.options import SweepOptions
from safetyrepro.sweep.outputs_cache import OutputsCache, OutputsCacheError
from safetyrepro.sweep.plan import select_configs
from safetyrepro.sweep.records import ItemRecord
from safetyrepro.sweep.sweeper import Sweep
from safetyrepro.sweep.timing import cell_seconds_per_item
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import load_rules

from .algorithm import BenchmarkProblem, CertifyResult, certify
from .outputs import check_out, whole_set, write_outputs

LATTICE_TOLERANCE = 1e-9


@dataclass
class _Timing:
    seconds: float = 0.0  # wall seconds of calls that did model work (loading excluded)
    evaluations: int = 0  # model evaluations (model x configuration x item, every seed) in them
    cpu_seconds: float = 0.0  # this process's CPU seconds in those calls (every thread): the budget's clock


@dataclass
class LiveOracle:
    """The oracle of a live run: `sweep` is a planned `Sweep` (sweeper.Sweep.create), never run."""

    sweep: Sweep
    say: Callable[[str], None] | None = None
    log_dir: Path | None = None  # Inspect's logs (lm-eval writes none here)
    drivers: dict = field(default_factory=dict)
    models_run: dict = field(default_factory=dict)  # label -> backend record (as run.json records it)
    load_seconds: dict = field(default_factory=dict)
    work_seconds: float = 0.0  # CPU seconds of model calls so far (loading excluded): what a time budget buys
    earlier_pieces: dict = field(default_factory=dict)  # the resumed run's cost.json: its totals carry over
    timing: dict = field(default_factory=dict)  # (model, config_id) -> _Timing
    rows: dict = field(default_factory=dict)  # (model, config_id, item_id, seed) -> items.parquet row
    calls: int = 0
    _lattices: dict = field(default_factory=dict)  # benchmark -> the lattice its problem declares
    _kept: dict = field(default_factory=dict)  # (model, config_id, item_id) -> {seed: item score} kept
    prior_rates: dict = field(default_factory=dict)  # (model, config_id) -> seconds per item, earlier certify runs
    sweep_rates: dict = field(default_factory=dict)  # (model, config_id) -> seconds per item, earlier sweeps' cells
    earlier_weights: dict = field(default_factory=dict)  # label -> {weights_sha256: the records file made with it}

    def __post_init__(self):
        self.cells = {(c.model, c.config.config_id): c for c in self.sweep.cells}
        blocked = [c for c in self.sweep.cells if not c.applicable]
        if blocked:
            c = blocked[0]
            raise UserError(
                f"{c.model} gives no continuation log-likelihoods, so it cannot run {c.config.config_id}; "
                "certify needs every model on every configuration: add --scoring free_form"
            )

    # -- the problem --------------------------------------------------------------------------
    def problems(self) -> tuple[BenchmarkProblem, ...]:
        spec = self.sweep.spec
        out = []
        for benchmark in spec.benchmarks:
            cells = [c for c in self.sweep.cells if c.config.benchmark == benchmark]
            configs = tuple(dict.fromkeys(c.config.config_id for c in cells))
            items = self.sweep.items_for(benchmark)
            ids = tuple(cell_item_ids(items, spec.limit))
            lattice = self._lattice(benchmark, cells)
            self._lattices[benchmark] = lattice
            out.append(BenchmarkProblem(benchmark, configs, tuple(spec.models), ids, lattice))
        return tuple(out)

    def _lattice(self, benchmark: str, cells) -> int:
        """Item scores are seed means of per-seed scores: multiples of 1/seeds, and of 1/k more for a
        logprob item whose k top candidates tie under the `expected` tie rule (credit 1/k). The lcm over
        the benchmark's configurations (WorBettingCS widens its bounds by a grid step when that lattice
        is finer than its grid)."""
        lattice = 1
        ties = None
        for c in cells:
            per = len(c.seeds)
            if c.config.scoring == "logprob" and self.sweep.spec.tie_rule == "expected":
                if ties is None:
                    bench = get_benchmark(benchmark)
                    k = max(len(bench.labels(it)) for it in self.sweep.items_for(benchmark).items)
                    ties = math.lcm(*range(1, k + 1))
                per = math.lcm(per, ties)
            lattice = math.lcm(lattice, per)
        return lattice

    def keep_earlier(self, frame: pd.DataFrame, subset: set[str] | None = None, source: str = "records") -> int:
        """Take earlier records (items.parquet of an earlier certify run or a sweep made the same way:
        models, rules, precision, package, tie rule; see check_earlier) as evaluated: a rerun, on this
        machine or a new one whose outputs cache is empty, goes on where that run stopped, and a sweep's
        --limit N records are the first N draws of `--order subset`. Records of other cells, of items
        outside this run's subset and of seeds the cell does not run are left out; a record given twice
        counts once; two records of one (model, configuration, item, seed) that disagree, and a score the
        cell's scoring cannot give (an edited file), are refused. Returns the (model, configuration, item)
        triples held."""
        frame = frame[[(m, c) in self.cells for m, c in zip(frame["model"], frame["config_id"], strict=True)]]
        cells = pd.DataFrame(
            [
                {
                    "model": m,
                    "config_id": c,
                    "precision": cell.config.precision,
                    "package": self.sweep.spec.package,
                    "n_seeds": len(cell.seeds),
                    "scoring": cell.config.scoring,
                }
                for (m, c), cell in self.cells.items()
            ]
        )
        frame, _ = checked_records(frame, cells, source, whole_cells=False)
        for row in frame.to_dict(orient="records"):
            key = (str(row["model"]), str(row["config_id"]), str(row["item_id"]))
            seed = int(row["seed"])
            if (subset is not None and key[2] not in subset) or seed not in self.cells[key[:2]].seeds:
                continue
            self.rows[key + (seed,)] = row
            self._kept.setdefault(key, {})[seed] = float(row["item_score"])
        return len(self._kept)

    def _held(self, model: str, cid: str, item_id: str) -> bool:
        return len(self._kept.get((model, cid, item_id), ())) == len(self.cells[(model, cid)].seeds)

    def held(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> int:
        """How many of the leading item_ids earlier records already answer (they cost nothing)."""
        n = 0
        for i in item_ids:
            if not self._held(model, config_id, str(i)):
                break
            n += 1
        return n

    def cost(self, benchmark: str, config_id: str, model: str) -> float:
        """Seconds one more item of this cell is expected to take (every seed): measured in this run, else
        from earlier runs (cost.json, a sweep's cell files), else the mean of cells scored and decoded the
        same way, else a default by kind; what the allocation ranks configurations by."""
        rate = self._rate(model, config_id)
        if rate is not None:
            return rate
        cell = self.cells[(model, config_id)]
        return DEFAULT_SECONDS_PER_ITEM[cell.config.scoring] * len(cell.seeds)

    def _rate(self, model: str, config_id: str) -> float | None:
        measured = {k: v.seconds / v.evaluations for k, v in self.timing.items() if v.evaluations}
        for rates in (measured, self.prior_rates, self.sweep_rates):
            if (model, config_id) in rates:
                return rates[(model, config_id)]
        kind = _kind(self.cells[(model, config_id)])
        known = {**self.sweep_rates, **self.prior_rates, **measured}
        alike = [
            r
            for (m, c), r in known.items()
            if m == model and (m, c) in self.cells and _kind(self.cells[(m, c)]) == kind
        ]
        return sum(alike) / len(alike) if alike else None

    # -- models -------------------------------------------------------------------------------
    def driver(self, model: str):
        """The model's driver, loaded on first use and kept (as the sweep opens a model: sweep/cell.py, with
        lm-eval's per-call log files left out: a certify run calls a cell many times)."""
        if model not in self.drivers:
            t0 = time.monotonic()
            self._say(f"loading {model} (outside the budget: a first load may join and convert its weights)")
            if self.sweep.spec.package == "inspect" and self.log_dir is None:
                raise ValueError("an Inspect run of certify needs a log folder")
            log_dir = str(self.log_dir) if self.sweep.spec.package == "inspect" else None
            try:
                with Heartbeat(lambda s: f"loading {model}: still loading ({s:.0f} s)", self._say):
                    opened = open_model(
                        self.sweep.entry(model), self.sweep.setup(log_dir), self.sweep.prefetch_seeds(model)
                    )
            except UserError:
                raise
            except Exception as e:
                raise UserError(f"{model} failed to load: {error_line(e)}") from None
            self.models_run[model] = opened.record
            sha = self.models_run[model].get("weights_sha256")
            other = {k: v for k, v in self.earlier_weights.get(model, {}).items() if k != sha}
            if sha and other:
                k, path = next(iter(other.items()))
                raise UserError(
                    f"{model}'s records in {path} were made with weights {k[:12]}..., this run loads "
                    f"{str(sha)[:12]}...: those records are not this model's (leave them out)"
                )
            self.drivers[model] = opened.driver
            self.load_seconds[model] = round(time.monotonic() - t0, 3)
        return self.drivers[model]

    # -- the oracle ---------------------------------------------------------------------------
    def __call__(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray:
        return self.evaluate_many([(benchmark, config_id, model, item_ids)])[0]

    def evaluate_many(
        self,
        requests: Sequence[tuple[str, str, str, Sequence[str]]],
        seconds_left: float | None = None,
        tick: Callable[[], None] | None = None,
    ) -> list[np.ndarray]:
        """Each request's item scores (seed means), configuration by configuration in the order asked (the
        models in the sweep's order within each), calling `tick` after each call. With `seconds_left` (CPU
        seconds of model work: loading and other processes' time do not count), no call starts once that
        much model work is done, and a call expected to outrun it is cut to the items that fit (by the
        cell's CPU seconds per item; items held from earlier records are free): a request may then be
        answered for a prefix of its items only."""
        deadline = None if seconds_left is None else self.work_seconds + seconds_left
        answers: list[np.ndarray] = [np.zeros(0)] * len(requests)
        # configuration by configuration, every model of it together (the drivers stay loaded): a budget
        # that ends inside a round leaves paired items behind, not one model's items with no partner
        rank = {m: i for i, m in enumerate(self.sweep.spec.models)}
        first: dict[tuple[str, str], int] = {}
        for i, (benchmark, cid, _, _) in enumerate(requests):
            first.setdefault((benchmark, cid), i)
        order = sorted(range(len(requests)), key=lambda i: (first[requests[i][:2]], rank[requests[i][2]]))
        for k, i in enumerate(order, 1):
            benchmark, cid, model, ids = requests[i]
            ids = list(ids)
            done: list[float] = []
            while len(done) < len(ids):
                left = None if deadline is None else deadline - self.work_seconds
                if left is not None and left <= 0:
                    break
                todo = self._fitting(benchmark, cid, model, ids[len(done) :], left)
                done += list(self._run(benchmark, cid, model, todo, where=(k, len(order), left)))
                if tick is not None:
                    tick()
            answers[i] = np.asarray(done, dtype=float)
            if deadline is not None and deadline - self.work_seconds <= 0:
                break
        return answers

    def _fitting(self, benchmark: str, cid: str, model: str, todo: list[str], left: float | None) -> list[str]:
        """The leading items of `todo` expected to fit in `left` seconds (at least one to evaluate)."""
        if left is None:
            return todo
        t = self.timing.get((model, cid))
        rate = t.cpu_seconds / t.evaluations if t and t.evaluations else self._rate(model, cid)
        if rate is None:  # nothing measured yet: the first call tells
            return todo
        fit = max(1, int(left / max(rate, 1e-9)))
        new = 0
        for j, i in enumerate(todo):
            if not self._held(model, cid, i):
                new += 1
                if new > fit:
                    return todo[:j]
        return todo

    def _run(
        self, benchmark: str, cid: str, model: str, ids: list[str], where: tuple[int, int, float | None] | None = None
    ) -> np.ndarray:
        """`where`: (this call's place in the round, the round's calls, the budget's deadline on the
        monotonic clock or None), for the progress line."""
        cell = self.cells[(model, cid)]
        label = f"{model} {cid}"
        kept = [i for i in ids if self._held(model, cid, i)]
        todo = [i for i in ids if not self._held(model, cid, i)]
        if not todo:  # every item from earlier records: no model needed
            return np.array([sum(self._kept[(model, cid, i)].values()) / len(cell.seeds) for i in ids], dtype=float)
        driver = self.driver(model)
        calls_before = driver.backend.model_calls
        t0, cpu0 = time.monotonic(), time.process_time()
        with Heartbeat(lambda s: f"{label}: {len(todo)} items, still evaluating ({s:.0f} s)", self._say):
            try:
                records = driver.run_cell(cell.config, cell.seeds, todo)
            except (UserError, OutputsCacheError):
                raise
            except Exception as e:
                raise UserError(
                    f"{label} failed: {error_line(e)} "
                    "(what was evaluated is in the outputs cache: rerun the same command to resume)"
                ) from None
        dt, cpu = time.monotonic() - t0, time.process_time() - cpu0
        self.calls += 1
        self.work_seconds += cpu
        worked = driver.backend.model_calls > calls_before
        if worked:
            t = self.timing.setdefault((model, cid), _Timing())
            t.seconds += dt
            t.cpu_seconds += cpu
            t.evaluations += len(todo)
        spec = self.sweep.spec
        by_item: dict[str, list[float]] = {}
        for r in records:
            by_item.setdefault(r.item_id, []).append(r.item_score)
            self.rows[(model, cid, r.item_id, r.seed)] = {
                "model": model,
                "config_id": cid,
                "benchmark": benchmark,
                "package": spec.package,
                "precision": cell.config.precision,
                **r.to_dict(),
            }
        for i in kept:
            by_item[i] = list(self._kept[(model, cid, i)].values())
        missing = [i for i in ids if len(by_item.get(i, ())) != len(cell.seeds)]
        if missing:
            raise UserError(
                f"{label}: the driver returned {len(by_item.get(missing[0], ()))} of {len(cell.seeds)} "
                f"seed records for item {missing[0]}"
            )
        scores = np.array([sum(by_item[i]) / len(cell.seeds) for i in ids], dtype=float)
        lattice = self._lattices.get(benchmark)
        if lattice is not None and not on_lattice(scores, lattice):
            raise RuntimeError(f"{label}: item scores off the lattice 1/{lattice} the confidence sequences assume")
        self._say(
            f"{label}: {len(todo)} items in {dt:.1f} s"
            + ("" if worked else " (cached)")
            + (f", {len(kept)} from earlier records" if kept else "")
            + _round_note(where)
        )
        return scores

    def _say(self, line: str) -> None:
        if self.say is not None:
            self.say(line)

    # -- outputs ------------------------------------------------------------------------------
    def records(self) -> pd.DataFrame:
        """items.parquet: every record this run evaluated or took from earlier records (a later run resumes
        from them, including a round's items a budget or an interrupt cut before the sequences used them),
        in the sweep's items.parquet columns, sorted by model, configuration, item and seed."""
        rows = list(self.rows.values())
        columns = ["model", "config_id", "benchmark", "package", "precision", *ItemRecord.__dataclass_fields__]
        frame = pd.DataFrame(rows, columns=columns)
        return frame.sort_values(["model", "config_id", "item_id", "seed"], kind="stable").reset_index(drop=True)

    def cost_extra(self, result) -> dict:
        """Measured seconds beside the full grid's estimate: each (model, configuration)'s measured
        seconds per model evaluation (one item, every seed) x the full subset's items, summed over the
        grid; a cell not measured in this run takes its rate from earlier certify runs whose records it
        holds, else from earlier sweeps' cell files (--records), else the mean rate of its benchmark."""
        # rounded as cost.json writes them, so that a rerun reading them back (prior_rates) sums the same grid
        rates = {f"{m}|{c}": round(t.seconds / t.evaluations, 4) for (m, c), t in self.timing.items() if t.evaluations}
        source = "this run"
        for (m, c), value in self.prior_rates.items():
            if f"{m}|{c}" not in rates:
                rates[f"{m}|{c}"] = value
                source = "this run and earlier certify runs" if self.timing else "earlier certify runs"
        by_cell = dict(rates)
        from_sweeps = {f"{m}|{c}": v for (m, c), v in self.sweep_rates.items() if f"{m}|{c}" not in rates}
        if from_sweeps:
            rates.update(from_sweeps)
            source += " (cells never certified: an earlier sweep's cell files)"
        full, per_benchmark, complete = 0.0, {}, True
        for problem in self.problems():
            mine = [rates[f"{m}|{c}"] for m in problem.models for c in problem.config_ids if f"{m}|{c}" in rates]
            mean = sum(mine) / len(mine) if mine else None
            per_benchmark[problem.benchmark] = None if mean is None else round(mean, 4)
            for m in problem.models:
                for c in problem.config_ids:
                    rate = rates.get(f"{m}|{c}", mean)
                    if rate is None:
                        complete = False
                        continue
                    full += rate * len(problem.item_ids)
        spec = self.sweep.spec
        now = {
            "seconds_model_work": round(sum(t.seconds for t in self.timing.values()), 3),
            "cpu_seconds_model_work": round(sum(t.cpu_seconds for t in self.timing.values()), 3),
            "model_evaluations_live": sum(t.evaluations for t in self.timing.values()),
        }
        # a run resumed piece by piece: what every piece spent, this one's added to the resumed run's totals
        before = self.earlier_pieces
        totals = {
            f"{k}_all_pieces": round(before.get(f"{k}_all_pieces", before.get(k, 0)) + v, 3) for k, v in now.items()
        }
        return {
            **now,
            **totals,
            "model_load_seconds": self.load_seconds,
            "oracle_calls": self.calls,
            "seconds_per_model_evaluation": per_benchmark,
            "seconds_per_model_evaluation_by_cell": {k: round(v, 4) for k, v in sorted(by_cell.items())},
            "measured_seconds_full_grid": round(full, 1) if complete and rates else None,
            "timing_from": source if rates else None,
            "live": {
                "models": list(spec.models),
                "model_specs": list(spec.model_specs),
                "benchmarks": list(spec.benchmarks),
                "package": spec.package,
                "precision": spec.precision,
                "tier": spec.tier,
                "filters": spec.filters,
                "limit": spec.limit,
                "tie_rule": spec.tie_rule,
                "rules_sha256": spec.rules_sha256,
            },
            "models_run": self.models_run,
        }


DEFAULT_SECONDS_PER_ITEM = {
    "logprob": 0.3,
    "free_form": 2.5,
}  # one seed, before anything is measured (docs/measured.md)
LIVE_ROUND_SECONDS = 600.0  # a live round's estimated cost: re-planned from what was learnt at least this often


def _kind(cell) -> tuple[str, int]:
    """Cells alike in cost: scoring, and seeds (a sampled decoding runs every seed)."""
    return cell.config.scoring, len(cell.seeds)


def _round_note(where: tuple[int, int, float | None] | None) -> str:
    """'; call 3 of 12 of the round, 1.4 h of the budget left' (the budget part only under a wall budget)."""
    if where is None:
        return ""
    k, n, left = where
    note = f"; call {k} of {n} of the round"
    if left is not None:
        note += f", {duration(max(0.0, left))} of model work left in the budget"
    return note


def plan_live(sweep_options: SweepOptions, out: Path):
    """The validated live run of `certify --models ...` (a planned Sweep), or a UserError before any model
    loads. `sweep_options`: the sweep's own (SweepOptions.from_args as certify's profile takes them; it
    runs the models here, whatever their executor)."""
    check_out(out)  # a sweep's, another command's or a user's files are never replaced
    sweep = Sweep.create(sweep_options)
    if len(sweep.spec.models) < 2:
        raise UserError("certify compares models pairwise: give at least two (--models A B ...)")
    return sweep


def run_live(
    sweep_options: SweepOptions,
    out: Path,
    options,
    say,
    records: Sequence[str | Path] = (),
    checkpoint_seconds: float = 600.0,
    selection: str = "none",
) -> tuple[CertifyResult, list[Path]]:
    """Plan, certify, write the outputs (under the folder's lock); (result, paths written). `records`:
    earlier items.parquet files (of sweeps or certify runs made the same way) whose items are taken as
    evaluated. The outputs are also written every `checkpoint_seconds` while the run goes on, and when
    it is interrupted, so a stopped run loses nothing a rerun would need."""
    _check_resumable(out)
    sweep = plan_live(sweep_options, out)
    oracle = LiveOracle(sweep, say=say, log_dir=out / "logs")
    problems = oracle.problems()
    earlier = [_earlier_source(Path(r), sweep.spec) for r in records]  # every given file checked before any is read
    OutputsCache(outputs_cache_path()).check()  # a bad cache is found here, not after a model load
    sweep.store.lock()  # one run at a time writes the folder; what it resumes from is read under the lock
    try:
        return _run_locked(
            sweep, oracle, problems, earlier, out, options, say, checkpoint_seconds, selection, sweep_options
        )
    finally:
        sweep.store.unlock()


def _run_locked(sweep, oracle, problems, earlier, out, options, say, checkpoint_seconds, selection, sweep_options):
    previous = _read_json(out / "cost.json") if whole_set(out) else None  # only a whole set is resumed
    _check_resumable(out)  # again under the lock: another run may have written meanwhile
    own = out / "items.parquet"
    if isinstance(previous, dict) and own.is_file() and not own.is_symlink():
        if _same_command(previous.get("live") or {}, sweep.spec):
            earlier.insert(0, (own, previous))
            oracle.earlier_pieces = previous
        elif say is not None:
            say(
                f"{own} is from another certify command ({same_why(previous.get('live') or {}, sweep.spec)}); "
                "starting afresh"
            )
    looked_at: dict[str, set[str]] = {}  # config -> items of the given --records (what a selection saw)
    for path, made in earlier:
        frame = read_records(path)
        if path != own:
            for cid, item in zip(frame["config_id"].astype(str), frame["item_id"].astype(str), strict=True):
                looked_at.setdefault(cid, set()).add(item)
        n = oracle.keep_earlier(frame, {str(i) for q in problems for i in q.item_ids}, str(path))
        for label, sha in _earlier_weights(path.parent, made).items():
            oracle.earlier_weights.setdefault(label, {})[sha] = path
        if "sweep_folder" in made:
            oracle.sweep_rates.update(
                {k: v for k, v in cell_seconds_per_item(path.parent).items() if k in oracle.cells}
            )
        else:
            oracle.prior_rates.update(_certify_rates(made))
        if say is not None:
            say(
                f"{'resuming' if path == own else 'earlier records'}: {n:,} (model, configuration, item) evaluations "
                f"held after {path}"
            )
    problems = chosen_validly(problems, selection, looked_at, sweep_options)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    spec = sweep.spec
    source = (
        f"live evaluation of {', '.join(spec.models)} on {', '.join(spec.benchmarks)} through "
        f"{spec.package} ({spec.precision}, {sum(len(q.config_ids) for q in problems)} configurations"
        + (f", the first {spec.limit} items" if spec.limit else "")
        + ")"
    )

    def write(result):
        extra = oracle.cost_extra(result)
        return write_outputs(result, out, oracle.records(), source, extra_cost=extra)

    def checkpoint(result):
        write(result)
        if say is not None:
            say(f"saved the run so far to {out} ({result.paired_evaluations:,} paired evaluations fed)")

    result = certify(
        problems, oracle, options, progress=say, checkpoint=checkpoint, checkpoint_seconds=checkpoint_seconds
    )
    return result, write(result)


def chosen_validly(
    problems: tuple[BenchmarkProblem, ...], selection: str, looked_at: dict[str, set[str]], sweep_options
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
    rules = load_rules(o.rules)
    out = []
    for p in problems:
        every = select_configs(rules, [p.benchmark], o.tier, o.precision, filters)
        out.append(
            dataclasses.replace(
                p, family_configs=tuple(c.config_id for c in every if c.config_id not in set(p.config_ids))
            )
        )
    return tuple(out)


def read_records(path: Path) -> pd.DataFrame:
    frame = read_table(path, what="items")
    missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(f"items file {path} lacks column(s) {', '.join(missing)}")
    scores = pd.to_numeric(frame["item_score"], errors="coerce")
    seeds = pd.to_numeric(frame["seed"], errors="coerce")
    bad = scores.isna() | (scores < 0) | (scores > 1) | seeds.isna() | (seeds != seeds.round())
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"items file {path} row {i + 1}: item_score must be a number in [0, 1] and seed a whole number")
    return frame.assign(
        model=frame["model"].astype(str),
        config_id=frame["config_id"].astype(str),
        item_id=frame["item_id"].astype(str),
        item_score=scores,
        seed=seeds.astype("int64"),
    )


def _check_resumable(out: Path) -> None:
    """A whole set whose cost.json is damaged is refused: starting afresh would replace its items.parquet,
    records a rerun needs. Checked before anything is planned or loaded."""
    if whole_set(out) and (out / "cost.json").exists() and _read_json(out / "cost.json") is None:
        raise UserError(
            f"--out {out}: its cost.json is damaged, so its items.parquet cannot be checked as this command's "
            "records; restore cost.json to resume, or choose another --out (give the folder's items.parquet "
            "to --records once cost.json is back)"
        )


def _read_json(path: Path):
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return json.loads(read_capped(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES"))
    except (ValueError, UnicodeDecodeError, OSError, UserError):
        return None


def _earlier_source(path: Path, spec) -> tuple[Path, dict]:
    """(items file, how it was made) for `--records PATH`: a sweep's or certify run's folder or its
    items.parquet, made the same way as this run (models and specs, package, precision, tie rule,
    rules); the item limit may differ (a record of an item is the same whatever else was scored)."""
    items = path / "items.parquet" if path.is_dir() else path
    folder = items.parent
    if not items.is_file():
        raise UserError(
            f"--records {path}: no items file there (give a sweep's or certify run's folder, or its items.parquet)"
        )
    sweep_json, cost = _read_json(folder / "sweep.json"), _read_json(folder / "cost.json")
    made = sweep_json if isinstance(sweep_json, dict) else (cost or {}).get("live") if isinstance(cost, dict) else None
    if not isinstance(made, dict):
        raise UserError(
            f"--records {path}: neither a sweep.json nor a live certify run's cost.json beside {items.name}, "
            "so how its records were made is unknown"
        )
    if not _same_command(made, spec):
        raise UserError(
            f"--records {path}: its records were made another way ({same_why(made, spec)}); certify "
            "takes only records of the same models, package, precision, tie rule and rules"
        )
    return items, (cost if isinstance(cost, dict) and made is not sweep_json else {**made, "sweep_folder": str(folder)})


def _certify_rates(cost: dict) -> dict[tuple[str, str], float]:
    """(model, configuration) -> measured seconds per item in an earlier certify run's cost.json."""
    out = {}
    for key, value in (cost.get("seconds_per_model_evaluation_by_cell") or {}).items():
        model, _, cid = str(key).partition("|")
        if cid and isinstance(value, (int, float)) and value > 0:
            out[(model, cid)] = float(value)
    return out


RESUME_KEYS = ("package", "precision", "tie_rule", "rules_sha256")


def _now(spec) -> dict:
    return {
        "package": spec.package,
        "precision": spec.precision,
        "tie_rule": spec.tie_rule,
        "rules_sha256": spec.rules_sha256,
    }


def _specs(made: dict) -> dict[str, str]:
    models, specs = made.get("models") or [], made.get("model_specs") or []
    if not isinstance(models, list) or not isinstance(specs, list) or len(models) != len(specs):
        return {}
    return {str(m): str(s) for m, s in zip(models, specs, strict=True)}


def _same_command(previous: dict, spec) -> bool:
    """Earlier records serve this run when they were made the same way: package, precision, tie rule and
    rules, and every model the two runs share under one label from the same spec. Other models, the
    filters and the item limit may differ (cells and items are matched one by one); the weights a
    label loads are checked when it loads (LiveOracle.driver)."""
    return not same_why(previous, spec)


def same_why(previous: dict, spec) -> str:
    now = _now(spec)
    why = [f"{k} was {shorten(previous.get(k))}" for k in RESUME_KEYS if previous.get(k) != now[k]]
    earlier = _specs(previous)
    if not earlier:
        why.append("its models and specs are not recorded")
    for label, model_spec in zip(spec.models, spec.model_specs, strict=True):
        if label in earlier and earlier[label] != model_spec:
            why.append(f"the spec of {shorten(label)} was {shorten(earlier[label])}")
    if earlier and not set(earlier) & set(spec.models):
        why.append("it shares no model with this run")
    return ", ".join(why)


def _earlier_weights(folder: Path, made: dict) -> dict[str, str]:
    """label -> weights_sha256 the earlier records were made with, where recorded (a certify run's
    cost.json, a sweep's grid.csv)."""
    out = {}
    for label, record in ((made.get("models_run") or {}) if isinstance(made.get("models_run"), dict) else {}).items():
        if isinstance(record, dict) and isinstance(record.get("weights_sha256"), str):
            out[str(label)] = record["weights_sha256"]
    grid = folder / "grid.csv"
    if "sweep_folder" in made and grid.is_file() and not grid.is_symlink():
        try:
            frame = pd.read_csv(grid, usecols=["model", "weights_sha256"], dtype=str)
        except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
            return out
        for label, sha in frame.dropna().drop_duplicates("model").itertuples(index=False):
            out[str(label)] = str(sha)
    return out


def on_lattice(scores: np.ndarray, lattice: int) -> bool:
    k = np.asarray(scores, dtype=float) * lattice
    return bool(np.all(np.abs(k - np.rint(k)) <= LATTICE_TOLERANCE * lattice))
