"""Live certification (`safetyrepro certify --models ...`): the oracle runs the models.

The sweep plans it: the same model specs, benchmarks, envelope filters, item subset (--limit N: the
first N items) and precision, validated by `Sweep.create` before any model loads. For (benchmark,
configuration, model, item ids) the oracle runs that cell through the sweep's own driver
(`drivers.make_driver(...).run_cell(config, seeds, item_ids)`: lm-eval's `simple_evaluate` or Inspect's
`eval` on exactly those items, every seed of a sampled configuration) on the sweep's cached backend
(`cached_backend.open_cached_backend`), and returns each item's mean item_score over the seeds: the
sweep's prompts, scoring functions and records, item for item. Every generation and log-likelihood goes
through the outputs cache shared with `sweep`, so an item evaluated before (by a sweep or by an earlier
certify run) costs nothing; a rerun of the same command with the same --seed draws the same items in the
same order and so resumes from the cache.

Models are loaded lazily, once, and kept for the run (the engine keeps them for the process, as a
sweep's local executor does); the algorithm hands the oracle a round's requests together
(`evaluate_many`), which are run model by model.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.errors import UserError

from .algorithm import BenchmarkProblem

HEARTBEAT_S = 30.0       # a line at least this often while one (model, configuration) call runs
LATTICE_TOLERANCE = 1e-9


@dataclass
class _Timing:
    seconds: float = 0.0      # wall seconds of calls that did model work (loading excluded)
    evaluations: int = 0      # model evaluations (model x configuration x item, every seed) in them


@dataclass
class LiveOracle:
    """The oracle of a live run: `sweep` is a planned `Sweep` (sweeper.Sweep.create), never run."""

    sweep: object
    say: Callable[[str], None] | None = None
    log_dir: Path | None = None              # Inspect's logs (lm-eval writes none here)
    drivers: dict = field(default_factory=dict)
    models_run: dict = field(default_factory=dict)   # label -> backend record (as run.json records it)
    load_seconds: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)       # (model, config_id) -> _Timing
    rows: dict = field(default_factory=dict)         # (model, config_id, item_id, seed) -> items.parquet row
    calls: int = 0
    _lattices: dict = field(default_factory=dict)   # benchmark -> the lattice its problem declares
    _kept: dict = field(default_factory=dict)       # (model, config_id, item_id) -> item scores kept, one per seed

    def __post_init__(self):
        self.cells = {(c.model, c.config.config_id): c for c in self.sweep.cells}
        blocked = [c for c in self.sweep.cells if not c.applicable]
        if blocked:
            c = blocked[0]
            raise UserError(f"{c.model} gives no continuation log-likelihoods, so it cannot run {c.config.config_id}; "
                            "certify needs every model on every configuration: add --scoring free_form")

    # -- the problem --------------------------------------------------------------------------
    def problems(self) -> tuple[BenchmarkProblem, ...]:
        from safetyrepro.sweep.runner import cell_item_ids

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
        from safetyrepro.tasks.benchmarks.registry import get_benchmark

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

    def keep_earlier(self, frame: pd.DataFrame) -> int:
        """Take an earlier run's records (its items.parquet, the same command: models, rules, precision,
        package, tie rule) as evaluated: a rerun, on this machine or a new one whose outputs cache is empty,
        goes on where that run stopped. Returns the (model, configuration, item) triples taken."""
        frame = frame[[(m, c) in self.cells for m, c in zip(frame["model"], frame["config_id"], strict=True)]]
        for row in frame.to_dict(orient="records"):
            key = (str(row["model"]), str(row["config_id"]), str(row["item_id"]))
            self.rows[(*key, int(row["seed"]))] = row
            self._kept.setdefault(key, []).append(float(row["item_score"]))
        return len(self._kept)

    # -- models -------------------------------------------------------------------------------
    def driver(self, model: str):
        """The model's driver, loaded on first use and kept (as the sweep's open_driver, with lm-eval's
        per-call log files left out: a certify run calls a cell many times)."""
        if model not in self.drivers:
            from safetyrepro.sweep.cached_backend import open_cached_backend
            from safetyrepro.sweep.drivers import backend_record, make_driver

            o, spec = self.sweep.options, self.sweep.spec
            t0 = time.monotonic()
            self._say(f"loading {model}")
            try:
                backend = open_cached_backend(self.sweep.entry(model), spec.precision, o.device, o.batch_size)
            except UserError:
                raise
            except Exception as e:
                raise UserError(f"{model} failed to load: {type(e).__name__}: {_first_line(e)}") from None
            backend.prefetch_seeds = self.sweep.prefetch_seeds(model)
            self.models_run[model] = backend_record(backend)
            log_dir = None
            if spec.package == "inspect":
                from safetyrepro.atomic import ensure_dir

                log_dir = str(ensure_dir(self.log_dir, root=self.log_dir.parent))
            self.drivers[model] = make_driver(spec.package, backend, self.sweep.rules, self.sweep.items_for, log_dir,
                                              spec.tie_rule)
            self.load_seconds[model] = round(time.monotonic() - t0, 3)
        return self.drivers[model]

    # -- the oracle ---------------------------------------------------------------------------
    def __call__(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray:
        return self.evaluate_many([(benchmark, config_id, model, item_ids)])[0]

    def evaluate_many(self, requests: Sequence[tuple[str, str, str, Sequence[str]]],
                      seconds_left: float | None = None) -> list[np.ndarray]:
        """Each request's item scores (seed means), configuration by configuration (the models in the
        sweep's order within each). With
        `seconds_left`, no call starts once that much time has passed, and a call expected to outrun it
        is cut to the items that fit (by the seconds per item measured so far): a request may then be
        answered for a prefix of its items only."""
        start = time.monotonic()
        answers: list[np.ndarray] = [np.zeros(0)] * len(requests)
        # configuration by configuration, every model of it together (the drivers stay loaded): a budget
        # that ends inside a round leaves paired items behind, not one model's items with no partner
        rank = {m: i for i, m in enumerate(self.sweep.spec.models)}
        first: dict[tuple[str, str], int] = {}
        for i, (benchmark, cid, _, _) in enumerate(requests):
            first.setdefault((benchmark, cid), i)
        order = sorted(range(len(requests)), key=lambda i: (first[requests[i][:2]], rank[requests[i][2]]))
        for i in order:
            benchmark, cid, model, ids = requests[i]
            ids = list(ids)
            done: list[float] = []
            while len(done) < len(ids):
                left = None if seconds_left is None else seconds_left - (time.monotonic() - start)
                if left is not None and left <= 0:
                    break
                todo = ids[len(done):]
                rate = self._rate(model, cid)
                if left is not None and rate and rate * len(todo) > left:
                    todo = todo[:max(1, int(left / rate))]
                done += list(self._run(benchmark, cid, model, todo))
            answers[i] = np.asarray(done, dtype=float)
            if seconds_left is not None and seconds_left - (time.monotonic() - start) <= 0:
                break
        return answers

    def _rate(self, model: str, cid: str) -> float | None:
        t = self.timing.get((model, cid))
        if t and t.evaluations:
            return t.seconds / t.evaluations
        mine = [v for (m, _), v in self.timing.items() if m == model and v.evaluations]
        return sum(v.seconds for v in mine) / sum(v.evaluations for v in mine) if mine else None

    def _run(self, benchmark: str, cid: str, model: str, ids: list[str]) -> np.ndarray:
        from safetyrepro.sweep.outputs_cache import OutputsCacheError

        cell = self.cells[(model, cid)]
        label = f"{model} {cid}"
        kept = [i for i in ids if len(self._kept.get((model, cid, i), ())) == len(cell.seeds)]
        todo = [i for i in ids if len(self._kept.get((model, cid, i), ())) != len(cell.seeds)]
        if not todo:  # every item from an earlier run's records: no model needed
            self._say(f"{label}: {len(ids)} items from the earlier run's records")
            return np.array([sum(self._kept[(model, cid, i)]) / len(cell.seeds) for i in ids], dtype=float)
        driver = self.driver(model)
        calls_before = driver.backend.model_calls
        t0 = time.monotonic()
        with _Heartbeat(self._say, label, len(todo)):
            try:
                records = driver.run_cell(cell.config, cell.seeds, todo)
            except (UserError, OutputsCacheError):
                raise
            except Exception as e:
                raise UserError(f"{label} failed: {type(e).__module__}.{type(e).__name__}: {_first_line(e)} "
                                "(what was evaluated is in the outputs cache: rerun the same command to resume)") \
                    from None
        dt = time.monotonic() - t0
        self.calls += 1
        worked = driver.backend.model_calls > calls_before
        if worked:
            t = self.timing.setdefault((model, cid), _Timing())
            t.seconds += dt
            t.evaluations += len(ids)
        spec = self.sweep.spec
        by_item: dict[str, list[float]] = {}
        for r in records:
            by_item.setdefault(r.item_id, []).append(r.item_score)
            self.rows[(model, cid, r.item_id, r.seed)] = {
                "model": model, "config_id": cid, "benchmark": benchmark, "package": spec.package,
                "precision": cell.config.precision, **r.to_dict()}
        for i in kept:
            by_item[i] = self._kept[(model, cid, i)]
        missing = [i for i in ids if len(by_item.get(i, ())) != len(cell.seeds)]
        if missing:
            raise UserError(f"{label}: the driver returned {len(by_item.get(missing[0], ()))} of {len(cell.seeds)} "
                            f"seed records for item {missing[0]}")
        scores = np.array([sum(by_item[i]) / len(cell.seeds) for i in ids], dtype=float)
        lattice = self._lattices.get(benchmark)
        if lattice is not None and not on_lattice(scores, lattice):
            raise RuntimeError(f"{label}: item scores off the lattice 1/{lattice} the confidence sequences assume")
        self._say(f"{label}: {len(todo)} items in {dt:.1f} s" + ("" if worked else " (cached)")
                  + (f", {len(kept)} from the earlier run's records" if kept else ""))
        return scores

    def _say(self, line: str) -> None:
        if self.say is not None:
            self.say(line)

    # -- outputs ------------------------------------------------------------------------------
    def records(self, evaluated: dict[tuple[str, str, str], np.ndarray]) -> pd.DataFrame:
        """items.parquet: the records of every (model, configuration, item) the run used, in the sweep's
        items.parquet columns, sorted by model, configuration, item and seed."""
        from safetyrepro.sweep.records import ItemRecord

        used = {(model, cid, str(i)) for (_, cid, model), items in evaluated.items() for i in items}
        used |= set(self._kept)  # an earlier run's records stay: they were evaluated, and a later run resumes from them
        rows = [r for (m, c, i, _), r in self.rows.items() if (m, c, i) in used]
        columns = ["model", "config_id", "benchmark", "package", "precision", *ItemRecord.__dataclass_fields__]
        frame = pd.DataFrame(rows, columns=columns)
        return frame.sort_values(["model", "config_id", "item_id", "seed"], kind="stable").reset_index(drop=True)

    def cost_extra(self, result, previous: dict | None) -> dict:
        """Measured seconds beside the full grid's estimate: each (model, configuration)'s measured
        seconds per model evaluation (one item, every seed) x the full subset's items, summed over the
        grid; a cell not measured in this run (every item came from the cache) takes its rate from the
        previous cost.json in the folder, else the mean rate of its benchmark."""
        rates = {f"{m}|{c}": t.seconds / t.evaluations for (m, c), t in self.timing.items() if t.evaluations}
        source = "this run"
        old = (previous or {}).get("seconds_per_model_evaluation_by_cell") or {}
        for key, value in old.items():
            if key not in rates and isinstance(value, (int, float)):
                rates[key] = float(value)
                source = "this run and an earlier run (cached items cost nothing now)" if self.timing else \
                    "an earlier run (every item came from the cache)"
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
        return {
            "seconds_model_work": round(sum(t.seconds for t in self.timing.values()), 3),
            "model_load_seconds": self.load_seconds,
            "oracle_calls": self.calls,
            "seconds_per_model_evaluation": per_benchmark,
            "seconds_per_model_evaluation_by_cell": {k: round(v, 4) for k, v in sorted(rates.items())},
            "measured_seconds_full_grid": round(full, 1) if complete and rates else None,
            "timing_from": source if rates else None,
            "live": {"models": list(spec.models), "model_specs": list(spec.model_specs),
                     "benchmarks": list(spec.benchmarks), "package": spec.package, "precision": spec.precision,
                     "tier": spec.tier, "filters": spec.filters, "limit": spec.limit, "tie_rule": spec.tie_rule,
                     "rules_sha256": spec.rules_sha256},
            "models_run": self.models_run,
        }


class _Heartbeat:
    """A progress line every HEARTBEAT_S while one call runs (a long call says it is alive)."""

    def __init__(self, say: Callable[[str], None], label: str, n: int):
        self.say, self.label, self.n = say, label, n
        self._stop = threading.Event()

    def __enter__(self):
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_S):
            self.say(f"{self.label}: {self.n} items, still evaluating ({time.monotonic() - self._t0:.0f} s)")

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


def plan_live(sweep_options, out: Path):
    """The validated live run of `certify --models ...` (a planned Sweep), or a UserError before any model
    loads. `sweep_options` are the sweep's own (sweep/cli.py options_from_args, called by the CLI)."""
    from safetyrepro.sweep.sweeper import Sweep

    if getattr(sweep_options, "executor", "local") != "local":
        raise UserError("certify runs its models here (--executor local): rounds are small and sequential")
    if (out / "sweep.json").exists() or (out / "grid.csv").exists():
        raise UserError(f"--out {out} holds a sweep; certify writes items.parquet and its own files there: "
                        "choose another --out")
    sweep = Sweep.create(sweep_options)
    if len(sweep.spec.models) < 2:
        raise UserError("certify compares models pairwise: give at least two (--models A B ...)")
    return sweep


def run_live(sweep_options, out: Path, options, say) -> tuple[object, list[Path]]:
    """Plan, certify, write the outputs (under the folder's lock); (result, paths written)."""
    from safetyrepro.sweep.cached_backend import outputs_cache_path
    from safetyrepro.sweep.outputs_cache import OutputsCache

    from .algorithm import certify
    from .outputs import write_outputs

    sweep = plan_live(sweep_options, out)
    oracle = LiveOracle(sweep, say=say, log_dir=out / "logs")
    problems = oracle.problems()
    OutputsCache(outputs_cache_path()).check()  # a bad cache is found here, not after a model load
    previous = None
    cost_path = out / "cost.json"
    if cost_path.is_file() and not cost_path.is_symlink():
        try:
            previous = json.loads(cost_path.read_text())
        except (ValueError, UnicodeDecodeError):
            previous = None
    earlier = out / "items.parquet"
    if isinstance(previous, dict) and earlier.is_file() and not earlier.is_symlink():
        same = _same_command(previous.get("live") or {}, sweep.spec)
        if same:
            n = oracle.keep_earlier(pd.read_parquet(earlier))
            if say is not None:
                say(f"resuming: {n:,} (model, configuration, item) evaluations from {earlier}")
        elif say is not None:
            say(f"{earlier} is from another certify command ({same_why(previous.get('live') or {}, sweep.spec)}); "
                "starting afresh")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sweep.store.lock()  # one run at a time writes the folder
    try:
        result = certify(problems, oracle, options, progress=say)
        spec = sweep.spec
        source = (f"live evaluation of {', '.join(spec.models)} on {', '.join(spec.benchmarks)} through "
                  f"{spec.package} ({spec.precision}, {sum(len(q.config_ids) for q in problems)} configurations"
                  + (f", the first {spec.limit} items" if spec.limit else "") + ")")
        extra = oracle.cost_extra(result, previous if isinstance(previous, dict) else None)
        paths = write_outputs(result, out, oracle.records(result.evaluated), source, extra_cost=extra)
        return result, paths
    finally:
        sweep.store.unlock()


RESUME_KEYS = ("models", "model_specs", "package", "precision", "tie_rule", "rules_sha256", "limit")


def _now(spec) -> dict:
    return {"models": list(spec.models), "model_specs": list(spec.model_specs), "package": spec.package,
            "precision": spec.precision, "tie_rule": spec.tie_rule, "rules_sha256": spec.rules_sha256,
            "limit": spec.limit}


def _same_command(previous: dict, spec) -> bool:
    """An earlier run's records serve this one when they were made the same way (models and their specs,
    package, precision, tie rule, rules, item limit); the filters may differ (its cells are matched one by one)."""
    now = _now(spec)
    return all(previous.get(k) == now[k] for k in RESUME_KEYS)


def same_why(previous: dict, spec) -> str:
    now = _now(spec)
    return ", ".join(f"{k} was {previous.get(k)!r}" for k in RESUME_KEYS if previous.get(k) != now[k])


def on_lattice(scores: np.ndarray, lattice: int) -> bool:
    k = np.asarray(scores, dtype=float) * lattice
    return bool(np.all(np.abs(k - np.rint(k)) <= LATTICE_TOLERANCE * lattice))
