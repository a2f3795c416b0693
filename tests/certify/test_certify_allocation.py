"""Where certification spends: the draw order (`--order`), cost-aware rounds, items held from earlier
records, checkpoints and interrupts. Synthetic grids built as a sweep builds them (certify_grids.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from certify_grids import synthetic_problem

from safetyrepro.certify.algorithm import CertifyOptions, certify, items_to_decide
from safetyrepro.certify.oracle import Oracle
from safetyrepro.cli import main


def reverses_with_template(cfg, model):
    ahead = cfg.template in ("T1", "T2")
    return (0.75 if model == "a" else 0.4) if ahead else (0.4 if model == "a" else 0.75)


class CostedOracle(Oracle):
    """A synthetic grid's oracle that knows what an item costs: sampled configurations 5 units a seed
    for free-form, log-probability 0.1, greedy free-form 1; it logs every request. It says which of the
    Oracle protocol's abilities it offers by overriding them (the rest keep the protocol's defaults)."""

    def __init__(self, oracle, held: dict | None = None):
        self.oracle, self.log, self.held_items = oracle, [], held or {}

    def __call__(self, benchmark, config_id, model, item_ids):
        self.log.append((config_id, model, tuple(item_ids)))
        return self.oracle(benchmark, config_id, model, item_ids)

    def cost(self, benchmark, config_id, model):
        if config_id.endswith("/logprob"):
            return 0.1
        return 1.0 if "/greedy/" in config_id else 5.0

    def spent(self):
        return sum(
            self.cost("", c, m) * len([i for i in ids if i not in self.held_items.get((c, m), ())])
            for c, m, ids in self.log
        )

    def held(self, benchmark, config_id, model, item_ids):
        mine = self.held_items.get((config_id, model), ())
        n = 0
        for i in item_ids:
            if i not in mine:
                break
            n += 1
        return n


def test_subset_order_draws_the_problems_own_order_and_seeded_order_permutes_it():
    problem, oracle, _ = synthetic_problem(np.random.default_rng(2), reverses_with_template, n_items=60)
    asked = CostedOracle(oracle)
    certify([problem], asked, CertifyOptions(order="subset", batch=10, budget_evaluations=200))
    firsts = {ids for c, m, ids in asked.log if ids and ids[0] == problem.item_ids[0]}
    assert firsts and all(ids == problem.item_ids[: len(ids)] for ids in firsts)
    seeded = CostedOracle(oracle)
    certify([problem], seeded, CertifyOptions(order="seeded", seed=4, batch=10, budget_evaluations=200))
    first = seeded.log[0][2]
    assert len(first) == 10 and first != problem.item_ids[:10] and set(first) <= set(problem.item_ids)
    with pytest.raises(ValueError, match="order"):
        certify([problem], oracle, CertifyOptions(order="shuffled"))


def test_cheap_configurations_are_asked_first_and_a_capped_round_holds_only_what_fits():
    problem, oracle, _ = synthetic_problem(np.random.default_rng(3), reverses_with_template, n_items=300)
    asked = CostedOracle(oracle)
    certify([problem], asked, CertifyOptions(batch=10, round_seconds=30.0, budget_evaluations=400))
    first_round = asked.log[:24]
    # the 12 log-probability configurations (0.1 a model-item: 2 for a batch of both models) come first
    assert {c for c, _, _ in first_round} == {c for c in problem.config_ids if c.endswith("/logprob")}
    # a capped round: 12 x 2 + a greedy free-form configuration (20) would pass 30 units
    assert len({c for c, _, _ in asked.log[:30]} - {c for c in problem.config_ids if c.endswith("/logprob")}) <= 3


def test_cost_aware_rounds_find_the_flip_for_less_than_uniform_rounds():
    """The lead reverses between templates on every scoring: the flip can be found on the cheap
    log-probability configurations; uniform rounds pay for every configuration alike."""
    totals = {"reversal_first": [], "uniform": []}
    verdicts = set()
    for k in range(3):
        problem, oracle, full = synthetic_problem(np.random.default_rng(10 + k), reverses_with_template)
        for allocation in totals:
            asked = CostedOracle(oracle)
            result = certify(
                [problem],
                asked,
                CertifyOptions(
                    batch=10, allocation=allocation, round_seconds=None if allocation == "uniform" else 60.0
                ),
            )
            verdicts.add(result.pairs[0].verdict)
            totals[allocation].append(asked.spent())
            for c in result.claims:  # the claims stay true: the allocation changes cost, not validity
                assert c.claim != "a_better" or full[c.config_id] > 0
                assert c.claim != "b_better" or full[c.config_id] < 0
    assert verdicts == {"flip"}
    assert sum(totals["reversal_first"]) < 0.5 * sum(totals["uniform"]), totals


def test_items_held_from_earlier_records_are_spent_first_and_cost_nothing():
    problem, oracle, _ = synthetic_problem(np.random.default_rng(5), reverses_with_template, n_items=100)
    expensive = [c for c in problem.config_ids if "/diverse/" in c][0]
    held = {(expensive, m): set(problem.item_ids[:40]) for m in problem.models}
    asked = CostedOracle(oracle, held)
    certify([problem], asked, CertifyOptions(order="subset", batch=10, round_seconds=1.0, budget_evaluations=50))
    assert asked.log[0][0] == expensive  # free before anything, however dear the configuration


def test_items_to_decide_matches_the_sequences_order_of_magnitude():
    log_inv_alpha = math.log(612 / 0.05)
    # a 40-point lead with half the items discordant decides after ~60 items (measured: median 57)
    assert 40 < items_to_decide(30, 0.4, 0.34, 300, log_inv_alpha, 0.05) < 100
    # a difference of zero needs every item (within_delta at 0.05 is out of reach before the end)
    assert items_to_decide(100, 0.0, 0.3, 300, log_inv_alpha, 0.05) == 300
    # few items: optimistic, so a configuration not yet looked at is worth a look
    assert items_to_decide(0, 0.0, 0.25, 300, log_inv_alpha, 0.05) < 60


def test_a_checkpoint_sees_the_run_so_far_and_an_interrupt_keeps_what_was_learnt():
    problem, oracle, _ = synthetic_problem(np.random.default_rng(6), reverses_with_template, n_items=100)
    seen = []
    certify(
        [problem],
        oracle,
        CertifyOptions(batch=10, budget_evaluations=300),
        checkpoint=seen.append,
        checkpoint_seconds=0.0,
    )
    assert seen and all(r.stopped_by == "running" for r in seen)
    assert [r.paired_evaluations for r in seen] == sorted(r.paired_evaluations for r in seen)
    calls = {"n": 0}

    def stops(benchmark, config_id, model, item_ids):
        calls["n"] += 1
        if calls["n"] > 150:
            raise KeyboardInterrupt
        return oracle(benchmark, config_id, model, item_ids)

    result = certify([problem], stops, CertifyOptions(batch=10))
    assert result.stopped_by == "interrupted" and result.paired_evaluations > 0
    assert sum(c.items_used for c in result.claims) == result.paired_evaluations


def test_order_subset_is_for_live_runs(tmp_path, capsys):
    rc = main(
        [
            "certify",
            "--replay",
            str(tmp_path / "i.parquet"),
            "--grid",
            str(tmp_path / "g.csv"),
            "--order",
            "subset",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--order subset" in err and len(err.strip().splitlines()) == 1
    rc = main(
        [
            "certify",
            "--replay",
            str(tmp_path / "i.parquet"),
            "--grid",
            str(tmp_path / "g.csv"),
            "--records",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--records is a live flag" in err


def test_the_time_to_close_the_open_claims_is_each_missing_item_at_its_cells_rate():
    from safetyrepro.certify.outputs import hours_to_close, report_markdown

    problem, oracle, _ = synthetic_problem(np.random.default_rng(7), reverses_with_template, n_items=50)
    result = certify([problem], oracle, CertifyOptions(batch=10, budget_evaluations=480))
    open_ = [c for c in result.claims if c.claim == "undecided"]
    assert open_ and result.stopped_by == "budget"
    rates = {f"{m}|{c.config_id}": 2.0 if m == "a" else 1.0 for c in open_ for m in ("a", "b")}
    missing = sum(50 - len(result.evaluated.get(("truthfulqa", c.config_id, "a"), ())) for c in open_)
    missing_b = sum(50 - len(result.evaluated.get(("truthfulqa", c.config_id, "b"), ())) for c in open_)
    assert hours_to_close(result, rates, {}) == pytest.approx((2.0 * missing + 1.0 * missing_b) / 3600)
    assert hours_to_close(result, {}, {}) is None  # a rate unknown: no estimate, rather than a wrong one
    assert hours_to_close(result, {}, {"truthfulqa": 1.0}) == pytest.approx((missing + missing_b) / 3600)
    text = report_markdown(result, "test", {"seconds_per_model_evaluation_by_cell": rates})
    assert f"about {(2.0 * missing + 1.0 * missing_b) / 3600:,.1f} h of model time" in text
