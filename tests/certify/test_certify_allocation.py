"""Where certification spends: the draw order (`--order`), flip hunting against today's cost-aware rounds,
items held from earlier records, checkpoints and interrupts. Synthetic grids built as a sweep builds them
(certify_grids.py); model time is the cost model's seconds (certify_grids.item_cost), never a clock."""

from __future__ import annotations

import math

import numpy as np
import pytest
from certify_grids import FLIP_WORLDS, STEADY_WORLDS, CostedOracle, pilot, synthetic_problem

from safetyrepro.certify.algorithm import CertifyOptions, certify, items_to_decide, win_odds
from safetyrepro.cli import main


def reverses_with_template(cfg, model):
    ahead = cfg.template in ("T1", "T2")
    return (0.75 if model == "a" else 0.4) if ahead else (0.4 if model == "a" else 0.75)


def test_subset_order_draws_the_problems_own_order_and_seeded_order_permutes_it():
    problem, oracle, _ = synthetic_problem(np.random.default_rng(2), reverses_with_template, n_items=60)
    asked = CostedOracle(oracle)
    certify([problem], asked, CertifyOptions(order="subset", batch=10, budget_evaluations=200, allocation="uniform"))
    firsts = {ids for c, m, ids in asked.log if ids and ids[0] == problem.item_ids[0]}
    assert firsts and all(ids == problem.item_ids[: len(ids)] for ids in firsts)
    seeded = CostedOracle(oracle)
    certify(
        [problem],
        seeded,
        CertifyOptions(order="seeded", seed=4, batch=10, budget_evaluations=200, allocation="uniform"),
    )
    first = seeded.log[0][2]
    assert len(first) == 10 and first != problem.item_ids[:10] and set(first) <= set(problem.item_ids)
    with pytest.raises(ValueError, match="order"):
        certify([problem], oracle, CertifyOptions(order="shuffled"))


def test_cheap_configurations_are_asked_first_and_a_capped_round_holds_only_what_fits():
    problem, oracle, _ = synthetic_problem(np.random.default_rng(3), reverses_with_template, n_items=300)
    asked = CostedOracle(oracle)
    certify(
        [problem],
        asked,
        CertifyOptions(batch=10, round_seconds=30.0, budget_evaluations=400, allocation="reversal_first"),
    )
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
        if calls["n"] > 12:
            raise KeyboardInterrupt
        return oracle(benchmark, config_id, model, item_ids)

    result = certify([problem], stops, CertifyOptions(batch=10))
    assert result.stopped_by == "interrupted" and result.paired_evaluations > 0
    assert sum(c.items_used for c in result.claims) == result.paired_evaluations


def test_a_replay_takes_only_its_own_flags(tmp_path, capsys):
    """`certify replay` has no draw order to choose (a replay's records carry none: it is seeded) and no earlier
    records to read; given, either is refused in one line, exit 2, the former spelling `--replay` included."""
    for spelling in (["replay", str(tmp_path / "i.parquet")], ["--replay", str(tmp_path / "i.parquet")]):
        for live_only in (["--order", "subset"], ["--records", str(tmp_path)]):
            with pytest.raises(SystemExit) as stop:
                main(
                    ["certify", *spelling, "--grid", str(tmp_path / "g.csv"), *live_only, "--out", str(tmp_path / "o")]
                )
            err = capsys.readouterr().err
            assert stop.value.code == 2 and f"unrecognized arguments: {live_only[0]}" in err
            assert len(err.strip().splitlines()) == 1


def test_the_time_to_close_the_open_claims_is_each_missing_item_at_its_cells_rate():
    from safetyrepro.certify.outputs import hours_to_close, report_markdown

    problem, oracle, _ = synthetic_problem(np.random.default_rng(7), reverses_with_template, n_items=50)
    result = certify([problem], oracle, CertifyOptions(batch=10, budget_evaluations=480, allocation="uniform"))
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


# -- flip hunting (issue 40) ----------------------------------------------------------------------------


def _hunt_and_today(world, seed: int, with_pilot: bool, **extra):
    """One seeded world certified by flip hunting and by today's cost-aware rounds (reversal_first), as a
    live run makes them (`--order subset`, rounds capped at 60 units, costs known): {allocation: (result,
    the model time it spent)}."""
    accuracy, models = world
    problem, oracle, _ = synthetic_problem(np.random.default_rng(100 + seed), accuracy, models=models)
    out = {}
    for allocation in ("reversal_first", "flip_hunt"):
        asked = CostedOracle(oracle, pilot(problem) if with_pilot else None)
        options = CertifyOptions(seed=seed, allocation=allocation, order="subset", round_seconds=60.0, **extra)
        out[allocation] = (certify([problem], asked, options), asked.spent(), asked, problem)
    return out


@pytest.mark.parametrize("with_pilot", [True, False], ids=["pilot_records", "no_records"])
def test_flip_hunting_decides_flips_for_at_most_half_the_model_time_of_todays_rounds(with_pilot):
    """Issue 40's acceptance, on the synthetic cost model: in every world whose law holds a flip (six
    kinds: the minority's win on cheap, free-form or only sampled chain-of-thought configurations, three
    models...) both allocations end `flip` on every pair, and flip hunting spends at most half of today's
    model time, with a 24-item pilot's records held (a sweep's --limit 24) and without; where no flip
    exists (one model ahead everywhere) it spends no more. Two worlds per kind keep it quick:
    perf/certify_allocation.py measures 20 (docs/certify.md)."""
    for name, world in FLIP_WORLDS.items():
        spent = {"reversal_first": 0.0, "flip_hunt": 0.0}
        for seed in range(2):
            for allocation, (result, cost, _, _) in _hunt_and_today(world, seed, with_pilot).items():
                assert {p.verdict for p in result.pairs} == {"flip"}, (name, seed, allocation)
                spent[allocation] += cost
        assert spent["flip_hunt"] <= 0.5 * spent["reversal_first"], (name, spent)
    for name, world in STEADY_WORLDS.items():
        for seed in range(2 if with_pilot else 1):
            runs = _hunt_and_today(world, seed, with_pilot)
            verdicts = {a: [p.verdict for p in r.pairs] for a, (r, *_) in runs.items()}
            assert verdicts["flip_hunt"] == verdicts["reversal_first"] and "flip" not in verdicts["flip_hunt"]
            assert runs["flip_hunt"][1] <= runs["reversal_first"][1], (name, seed)


def test_a_small_budget_decides_the_cheap_flip_of_every_pair_before_any_dear_configuration():
    """Three models, each pair's flip to be had on log-probability configurations: on a budget of 100 units
    of model time (0.08 % of the full grid's) flip hunting decides all three flips and pays for no
    free-form item; today's rounds decide one and pay for free-form ones."""
    for seed in range(3):
        runs = _hunt_and_today(FLIP_WORLDS["three models, three flips"], seed, True, budget_seconds=100.0)
        flips = {a: sum(p.verdict == "flip" for p in r.pairs) for a, (r, *_) in runs.items()}
        result, cost, asked, problem = runs["flip_hunt"]
        assert flips["flip_hunt"] == 3 and flips["reversal_first"] < 3, flips
        paid = [c for c, m, ids in asked.log if ids and ids[0] not in problem.item_ids[:24]]
        assert paid and all(c.endswith("/logprob") for c in paid) and cost <= 100.0


def test_flip_hunting_reads_the_pilot_first_then_hunts_where_it_points():
    """The pilot's records (free) are read in a round of their own; the first paid round then asks only
    the configuration the pilot makes likeliest to give the minority's win (b's: a leads on 47 of 48) at
    the lowest cost: the one cheap configuration where b leads. a's win, on any of the others, comes next."""
    accuracy, models = FLIP_WORLDS["one cheap reversal"]
    problem, oracle, full = synthetic_problem(np.random.default_rng(4), accuracy, models=models)
    asked = CostedOracle(oracle, pilot(problem))
    result = certify([problem], asked, CertifyOptions(order="subset", round_seconds=60.0))
    free = [(c, m) for c, m, ids in asked.log if ids == problem.item_ids[:24]]
    assert len(free) == 2 * 48 and asked.log[: len(free)] == [(c, m, problem.item_ids[:24]) for c, m in free]
    first_paid = asked.log[len(free) : len(free) + 2]
    assert {(c, m) for c, m, _ in first_paid} == {("truthfulqa/T3/greedy/3shot/logprob", m) for m in "ab"}
    assert result.pairs[0].verdict == "flip" and full["truthfulqa/T3/greedy/3shot/logprob"] < 0
    assert all(c.endswith("/logprob") for c, _, ids in asked.log if ids != problem.item_ids[:24])


def test_win_odds_by_hand():
    log_inv_alpha = math.log(2 * 48 / 0.05)
    # nothing seen: the prior alone (sd 0.3), the same either way; a win needs the difference past the
    # smallest 300 items can certify at variance 0.3, where the items formula gives exactly 300
    smallest = (log_inv_alpha + math.sqrt(log_inv_alpha**2 + 8 * 300 * 0.3 * log_inv_alpha)) / 600
    assert 2 * 0.3 * log_inv_alpha / smallest**2 + log_inv_alpha / smallest == pytest.approx(300)
    p_up, _ = win_odds(0, 0.0, 0.3, 300, log_inv_alpha, 1)
    p_down, _ = win_odds(0, 0.0, 0.3, 300, log_inv_alpha, -1)
    assert p_up == pytest.approx(p_down) == pytest.approx(0.5 * math.erfc(smallest / 0.3 / math.sqrt(2)))
    # 24 items at +0.4: a win for a is near certain and about 60 items away; one for b is out of reach
    p_a, items_a = win_odds(24, 0.4, 0.3, 300, log_inv_alpha, 1)
    p_b, _ = win_odds(24, 0.4, 0.3, 300, log_inv_alpha, -1)
    assert p_a > 0.95 and 30 < items_a < 100 and p_b < 1e-4
    # the subset target knows the sign at n: any difference can be won with every item in
    assert win_odds(100, -0.02, 0.3, 300, log_inv_alpha, -1, exact_at_n=True)[0] > 0.6
    assert win_odds(100, -0.02, 0.3, 300, log_inv_alpha, -1)[0] < 0.05


def test_the_cli_offers_every_allocation_and_defaults_to_flip_hunting(tmp_path, capsys):
    from safetyrepro.certify.algorithm import ALLOCATIONS

    assert CertifyOptions().allocation == "flip_hunt"
    with pytest.raises(SystemExit) as stop:
        main(["certify", "--replay", "i", "--grid", "g", "--allocation", "greedy", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "'greedy'" in err
    offered = err[err.index("choose from") :]
    assert all(f"'{a}'" in offered for a in ALLOCATIONS) and offered.count("'") == 2 * len(ALLOCATIONS)
