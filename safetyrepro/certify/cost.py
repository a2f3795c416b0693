"""What a live run's items cost, and what it spent: the rate of each (model, configuration) that the
allocation ranks configurations by and a time budget cuts calls by, and the accounting cost.json keeps
(measured seconds, the full grid's estimate from them, the totals of every piece of a resumed run)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .algorithm import BenchmarkProblem

DEFAULT_SECONDS_PER_ITEM = {
    "logprob": 0.3,
    "free_form": 2.5,
}  # one seed, before anything is measured (docs/measured.md)


@dataclass
class Timing:
    seconds: float = 0.0  # wall seconds of calls that did model work (loading excluded)
    evaluations: int = 0  # model evaluations (model x configuration x item, every seed) in them
    cpu_seconds: float = 0.0  # this process's CPU seconds in those calls (every thread): the budget's clock


def kind(cell) -> tuple[str, int]:
    """Cells alike in cost: scoring, and seeds (a sampled decoding runs every seed)."""
    return cell.config.scoring, len(cell.seeds)


def certify_rates(cost: dict) -> dict[tuple[str, str], float]:
    """(model, configuration) -> measured seconds per item in an earlier certify run's cost.json."""
    out = {}
    for key, value in (cost.get("seconds_per_model_evaluation_by_cell") or {}).items():
        model, _, cid = str(key).partition("|")
        if cid and isinstance(value, (int, float)) and value > 0:
            out[(model, cid)] = float(value)
    return out


@dataclass
class CostBook:
    """A live run's costs: `cells` are its (model, config_id) -> Cell."""

    cells: dict
    timing: dict = field(default_factory=dict)  # (model, config_id) -> Timing
    load_seconds: dict = field(default_factory=dict)  # label -> seconds its load took
    earlier_pieces: dict = field(default_factory=dict)  # the resumed run's cost.json: its totals carry over
    prior_rates: dict = field(default_factory=dict)  # (model, config_id) -> seconds per item, earlier certify runs
    sweep_rates: dict = field(default_factory=dict)  # (model, config_id) -> seconds per item, earlier sweeps' cells

    def spent(self, model: str, config_id: str, seconds: float, cpu_seconds: float, evaluations: int) -> None:
        """A call that did model work: its wall and CPU seconds and the model evaluations it ran."""
        t = self.timing.setdefault((model, config_id), Timing())
        t.seconds += seconds
        t.cpu_seconds += cpu_seconds
        t.evaluations += evaluations

    def per_item(self, model: str, config_id: str) -> float:
        """Seconds one more item of this cell is expected to take (every seed): measured in this run, else
        from earlier runs (cost.json, a sweep's cell files), else the mean of cells scored and decoded the
        same way, else a default by kind; what the allocation ranks configurations by."""
        rate = self.rate(model, config_id)
        if rate is not None:
            return rate
        cell = self.cells[(model, config_id)]
        return DEFAULT_SECONDS_PER_ITEM[cell.config.scoring] * len(cell.seeds)

    def cpu_per_item(self, model: str, config_id: str) -> float | None:
        """CPU seconds one more item takes, measured in this run, else the rate: what a time budget buys."""
        t = self.timing.get((model, config_id))
        return t.cpu_seconds / t.evaluations if t and t.evaluations else self.rate(model, config_id)

    def rate(self, model: str, config_id: str) -> float | None:
        measured = {k: v.seconds / v.evaluations for k, v in self.timing.items() if v.evaluations}
        for rates in (measured, self.prior_rates, self.sweep_rates):
            if (model, config_id) in rates:
                return rates[(model, config_id)]
        alike_kind = kind(self.cells[(model, config_id)])
        known = {**self.sweep_rates, **self.prior_rates, **measured}
        alike = [
            r
            for (m, c), r in known.items()
            if m == model and (m, c) in self.cells and kind(self.cells[(m, c)]) == alike_kind
        ]
        return sum(alike) / len(alike) if alike else None

    def accounts(self, problems: tuple[BenchmarkProblem, ...], calls: int) -> dict:
        """cost.json's measured seconds beside the full grid's estimate: each (model, configuration)'s
        measured seconds per model evaluation (one item, every seed) x the full subset's items, summed over
        the grid; a cell not measured in this run takes its rate from earlier certify runs whose records it
        holds, else from earlier sweeps' cell files (--records), else the mean rate of its benchmark. `calls`:
        the oracle's calls (of the driver)."""
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
        for problem in problems:
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
            "oracle_calls": calls,
            "seconds_per_model_evaluation": per_benchmark,
            "seconds_per_model_evaluation_by_cell": {k: round(v, 4) for k, v in sorted(by_cell.items())},
            "measured_seconds_full_grid": round(full, 1) if complete and rates else None,
            "timing_from": source if rates else None,
        }
