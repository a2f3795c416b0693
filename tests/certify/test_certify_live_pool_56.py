"""A live run's pool beyond the subset (issue 56): with `--limit N` the rest of the fixed subset is the cheap twins'
partner pool under `--control auto`, the costly configurations never leave their first N items, a rerun keeps the
partner records, and items that chose the configurations are not partners. A stand-in driver, no model."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np
from certify_grids import StandInRecord

from safetyrepro.certify.algorithm import CertifyOptions, certify
from safetyrepro.certify.live import LiveOracle, chosen_validly
from safetyrepro.certify.outputs import _control_lines
from safetyrepro.sweep.plan import Cell

FREE, TWIN = "truthfulqa/T1/greedy/0shot/free_form", "truthfulqa/T1/greedy/0shot/logprob"
ACCURACY = {"a": 0.75, "b": 0.45}


def _uniform(*key: str) -> float:
    return zlib.crc32("/".join(key).encode()) / 2**32


class _Driver:
    """Each model's log-probability answer to an item is right with its ACCURACY; its free-form answer is that
    answer with probability 0.8, else a fresh draw (the twins correlate at about 0.8)."""

    def __init__(self, model: str, log: list):
        self.model, self.log = model, log
        self.backend = SimpleNamespace(model_calls=0)

    def answer(self, scoring: str, item: str) -> float:
        p = ACCURACY[self.model]
        twin = float(_uniform(self.model, "logprob", item) < p)
        if scoring == "logprob" or _uniform(self.model, "tie", item) < 0.8:
            return twin
        return float(_uniform(self.model, "fresh", item) < p)

    def run_cell(self, cfg, seeds, ids):
        self.log.append((self.model, cfg.config_id, tuple(ids)))
        return [StandInRecord(i, s, self.answer(cfg.scoring, i)) for i in ids for s in seeds]


def _live(limit: int, n: int = 600):
    configs = [
        SimpleNamespace(config_id=c, benchmark="truthfulqa", scoring=c.rsplit("/", 1)[1], precision="fp32")
        for c in (FREE, TWIN)
    ]
    items = SimpleNamespace(items=[SimpleNamespace(id=f"truthfulqa/{k:04d}") for k in range(n)])
    spec = SimpleNamespace(
        models=("a", "b"), package="lm-eval", limit=limit, benchmarks=("truthfulqa",), tie_rule="first"
    )
    sweep = SimpleNamespace(
        cells=[Cell(m, c, (0,)) for m in ("a", "b") for c in configs], spec=spec, items_for=lambda b: items
    )
    log: list = []
    oracle = LiveOracle(sweep)
    oracle.drivers = {m: _Driver(m, log) for m in ("a", "b")}
    return oracle, log


def test_the_rest_of_the_subset_beyond_limit_is_the_twins_partner_pool():
    oracle, log = _live(limit=200)
    (problem,) = oracle.problems()
    assert len(problem.item_ids) == 200 and len(problem.pool) == 400
    assert problem.pool[0] == "truthfulqa/0200" and not set(problem.pool) & set(problem.item_ids)
    options = CertifyOptions(alpha=0.05, delta=0.0, seed=4, control="auto", batch=10)
    result = certify([problem], oracle, options)
    asked = {(m, c): {i for mm, cc, ids in log if (mm, cc) == (m, c) for i in ids} for m in "ab" for c in (FREE, TWIN)}
    beyond = set(problem.pool)
    assert not (asked[("a", FREE)] | asked[("b", FREE)]) & beyond  # the costly cells stay in their first N items
    partners = asked[("a", TWIN)] & beyond
    assert partners and partners == asked[("b", TWIN)] & beyond  # both models' twins score the same partners
    did = result.control["truthfulqa"]
    assert did["pool_beyond_subset"] == 400 and did["partner_steps"] > 0
    assert did["partner_items_evaluated"] == 2 * len(partners)  # both models' twin on each partner item
    (line,) = [x for x in _control_lines(result) if x]
    assert f"{2 * len(partners):,} partner model evaluations of the twins, first from the 400 items beyond" in line
    free = [c for c in result.claims if c.config_id == FREE]
    assert free[0].claim == "a_better" and free[0].n_full == 200  # partners cost the costly stream no item

    # a rerun from the records (a new machine, no outputs cache) asks the models for no item they answered
    records = oracle.records()
    assert set(records.loc[records["config_id"] == TWIN, "item_id"]) >= partners
    again, log_again = _live(limit=200)
    (problem,) = again.problems()
    again.keep_earlier(records, {*problem.item_ids, *problem.pool})
    rerun = certify([problem], again, options)
    answered = {(m, c, i) for m, c, ids in log for i in ids}
    assert not answered & {(m, c, i) for m, c, ids in log_again for i in ids}
    assert [c.claim for c in rerun.claims] == [c.claim for c in result.claims]


def test_without_limit_there_is_no_pool_and_looked_at_items_are_never_partners():
    oracle, _ = _live(limit=None, n=300)  # the whole fixed subset is the costly one
    assert oracle.problems()[0].pool == ()
    oracle, _ = _live(limit=100, n=300)
    looked = {FREE: {"truthfulqa/0150", "truthfulqa/0010"}, TWIN: {"truthfulqa/0151"}}
    (chosen,) = chosen_validly(oracle.problems(), "records", looked, SimpleNamespace())
    assert len(chosen.pool) == 198 and not {"truthfulqa/0150", "truthfulqa/0151"} & set(chosen.pool)
    assert chosen.excluded[FREE] == frozenset(looked[FREE])
    (kept,) = chosen_validly(oracle.problems(), "none", looked, SimpleNamespace())
    assert len(kept.pool) == 200  # configurations fixed before any data: every item of the pool
    assert np.array_equal(sorted(kept.pool), sorted(f"truthfulqa/{k:04d}" for k in range(100, 300)))
