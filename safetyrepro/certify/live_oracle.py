"""The oracle of a live run (`safetyrepro certify live --models ...`): it runs the models.

For (benchmark, configuration, model, item ids) it runs that cell through the model the sweep opens
(`sweep/cell.py` `open_model`: the package's driver on the cached backend; `run_cell(config, seeds,
item_ids)`: lm-eval's `simple_evaluate` or Inspect's `eval` on exactly those items, every seed of a
sampled configuration), and returns each item's mean item_score over the seeds: the sweep's prompts,
scoring functions and records, item for item. Every generation and log-likelihood goes through the
outputs cache shared with `sweep`, so an item evaluated before (by a sweep or by an earlier certify run)
costs nothing; items held from earlier records (`keep_earlier`) cost nothing either.

Models are loaded lazily, once, and kept for the run (the engine keeps them for the process, as a
sweep's local executor does); the algorithm hands the oracle a round's requests together
(`evaluate_many`), which are run model by model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from safetyrepro.console import Heartbeat, duration
from safetyrepro.errors import UserError, error_line
from safetyrepro.grid.exact import ITEM_TOLERANCE, item_lattice, on_lattice
from safetyrepro.grid.item_validation import checked_records
from safetyrepro.sweep.cell import CellCall, CellSetup, call_cell, cell_item_ids, open_model
from safetyrepro.sweep.outputs_cache import OutputsCacheError
from safetyrepro.sweep.records import ItemRecord
from safetyrepro.sweep.sweeper import Sweep
from safetyrepro.tasks.benchmark import shares_tie_credit
from safetyrepro.tasks.benchmarks.registry import get_benchmark

from .algorithm import BenchmarkProblem
from .cost import CostBook
from .oracle import Oracle, Request
from .resume import made_by


@dataclass
class LiveOracle(Oracle):
    """The oracle of a live run: `sweep` is a planned `Sweep` (sweeper.Sweep.create), never run."""

    sweep: Sweep
    say: Callable[[str], None] | None = None
    log_dir: Path | None = None  # Inspect's logs (lm-eval writes none here)
    drivers: dict = field(default_factory=dict)
    models_run: dict = field(default_factory=dict)  # label -> backend record (as run.json records it)
    work_seconds: float = 0.0  # CPU seconds of model calls so far (loading excluded): what a time budget buys
    rows: dict = field(default_factory=dict)  # (model, config_id, item_id, seed) -> items.parquet row
    calls: int = 0
    _lattices: dict = field(default_factory=dict)  # benchmark -> the lattice its problem declares
    _kept: dict = field(default_factory=dict)  # (model, config_id, item_id) -> {seed: item score} kept
    earlier_weights: dict = field(default_factory=dict)  # label -> {weights_sha256: the records file made with it}
    carried: pd.DataFrame | None = None  # the folder's own records (a rerun): those it does not use are kept

    def __post_init__(self):
        self.cells = {(c.model, c.config.config_id): c for c in self.sweep.cells}
        self.costs = CostBook(self.cells)  # what items cost and what the run spent (cost.json)
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
            # the rest of the fixed subset beyond --limit: drawn and ordered as the first N (a seeded stratified
            # draw, shuffled), so its items are draws like theirs; with --control auto the cheap twins score
            # them as partner items (issue 56), and nothing else reads them
            pool = tuple(cell_item_ids(items, None)[len(ids) :])
            lattice = self._lattice(benchmark, cells)
            self._lattices[benchmark] = lattice
            out.append(BenchmarkProblem(benchmark, configs, tuple(spec.models), ids, lattice, pool=pool))
        return tuple(out)

    def _lattice(self, benchmark: str, cells) -> int:
        """The lattice the benchmark's item scores are on (safetyrepro/grid/exact.py `item_lattice`): seed means,
        and for a logprob item under the `expected` tie rule its candidates' share of credit; the lcm over
        the benchmark's configurations (WorBettingCS widens its bounds by a grid step when that lattice is
        finer than its grid)."""
        lattice = 1
        ties = None
        for c in cells:
            shared = c.config.scoring == "logprob" and shares_tie_credit(self.sweep.spec.tie_rule)
            if shared and ties is None:
                bench = get_benchmark(benchmark)
                ties = max(len(bench.labels(it)) for it in self.sweep.items_for(benchmark).items)
            lattice = math.lcm(lattice, item_lattice(len(c.seeds), ties if shared else None))
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
        """Seconds one more item of this cell is expected to take, every seed (cost.py)."""
        return self.costs.per_item(model, config_id)

    def work_clock(self) -> float:
        return self.work_seconds

    # -- models -------------------------------------------------------------------------------
    def driver(self, model: str):
        """The model's driver, loaded on first use and kept (as the sweep opens a model: sweep/cell.py, with
        lm-eval's per-call log files left out: a certify run calls a cell many times); under the Ray executor
        the worker that holds it (ray_oracle.py)."""
        if model not in self.drivers:
            t0 = time.monotonic()
            self._say(f"loading {model} (outside the budget: a first load may join and convert its weights)")
            if self.sweep.spec.package == "inspect" and self.log_dir is None:
                raise ValueError("an Inspect run of certify needs a log folder")
            log_dir = str(self.log_dir) if self.sweep.spec.package == "inspect" else None
            try:
                with Heartbeat(lambda s: f"loading {model}: still loading ({s:.0f} s)", self._say):
                    handle, record = self._open(model, self.sweep.setup(log_dir))
            except UserError:
                raise
            except Exception as e:
                raise UserError(f"{model} failed to load: {error_line(e)}") from None
            self.models_run[model] = record
            sha = record.get("weights_sha256")
            other = {k: v for k, v in self.earlier_weights.get(model, {}).items() if k != sha}
            if sha and other:
                k, path = next(iter(other.items()))
                raise UserError(
                    f"{model}'s records in {path} were made with weights {k[:12]}..., this run loads "
                    f"{str(sha)[:12]}...: those records are not this model's (leave them out)"
                )
            self.drivers[model] = handle
            self.costs.load_seconds[model] = round(time.monotonic() - t0, 3)
        return self.drivers[model]

    def start(self) -> None:
        """Before the first model loads: nothing here (the Ray oracle joins or starts its cluster)."""

    def close(self) -> None:
        """After the run: the models stay loaded for the process, as a sweep's local executor keeps them."""

    def _open(self, model: str, setup: CellSetup) -> tuple[object, dict]:
        """(what runs the model's calls, run.json's record of its backend): here, the package's driver."""
        opened = open_model(self.sweep.entry(model), setup, self.sweep.prefetch_seeds(model))
        return opened.driver, opened.record

    def _call(self, model: str, cell, item_ids: list[str]) -> CellCall:
        """Every seed of the cell on `item_ids`, through the model's driver here."""
        return call_cell(self.driver(model), cell, item_ids)

    # -- the oracle ---------------------------------------------------------------------------
    def __call__(self, benchmark: str, config_id: str, model: str, item_ids: Sequence[str]) -> np.ndarray:
        return self.evaluate_many([(benchmark, config_id, model, item_ids)])[0]

    def evaluate_many(
        self,
        requests: Sequence[Request],
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
        rate = self.costs.cpu_per_item(model, cid)
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
        self.driver(model)  # loaded before the call (its time is not the call's)
        with Heartbeat(lambda s: f"{label}: {len(todo)} items, still evaluating ({s:.0f} s)", self._say):
            try:
                call = self._call(model, cell, todo)
            except (UserError, OutputsCacheError):
                raise
            except Exception as e:
                raise UserError(
                    f"{label} failed: {error_line(e)} "
                    "(what was evaluated is in the outputs cache: rerun the same command to resume)"
                ) from None
        records, dt, cpu, worked = call.records, call.seconds, call.cpu_seconds, call.worked
        self.calls += 1
        self.work_seconds += cpu
        if worked:
            self.costs.spent(model, cid, dt, cpu, len(todo))
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
        if lattice is not None and not on_lattice(scores, lattice, ITEM_TOLERANCE):
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
        key = ["model", "config_id", "item_id", "seed"]
        if self.carried is not None and len(self.carried):
            # a rerun of fewer models, configurations or items (--held-only included) never writes fewer records
            # than its folder held: the ones it did not use go back as they were
            old = self.carried.reindex(columns=columns)
            mine = set(
                zip(
                    frame["model"].astype(str),
                    frame["config_id"].astype(str),
                    frame["item_id"].astype(str),
                    frame["seed"].astype(int),
                    strict=True,
                )
            )
            keep = [
                k not in mine
                for k in zip(
                    old["model"].astype(str),
                    old["config_id"].astype(str),
                    old["item_id"].astype(str),
                    old["seed"].astype(int),
                    strict=True,
                )
            ]
            if any(keep):
                frame = (
                    old[keep].reset_index(drop=True)
                    if frame.empty
                    else pd.concat([frame, old[keep]], ignore_index=True)
                )
        return frame.sort_values(key, kind="stable").reset_index(drop=True)

    def cost_extra(self) -> dict:
        """cost.json's fields of a live run: what it spent and measured (cost.py), how its records were
        made (what a rerun and `--records` compare) and the models it loaded."""
        # the resumed run's models stay recorded where this piece loaded none of them (a --held-only re-read, a
        # piece that ran other models): a later piece checks the weights of the records against them
        earlier = self.costs.earlier_pieces.get("models_run")
        return {
            **self.costs.accounts(self.problems(), self.calls),
            "live": made_by(self.sweep.spec),
            "models_run": {**(earlier if isinstance(earlier, dict) else {}), **self.models_run},
        }


def _round_note(where: tuple[int, int, float | None] | None) -> str:
    """'; call 3 of 12 of the round, 1.4 h of the budget left' (the budget part only under a wall budget)."""
    if where is None:
        return ""
    k, n, left = where
    note = f"; call {k} of {n} of the round"
    if left is not None:
        note += f", {duration(max(0.0, left))} of model work left in the budget"
    return note
