"""certify --control (issue 45): which configurations are paired, the paths' items, what the control costs and
saves on synthetic grids whose free-form and log-probability differences correlate (certify_grids.py
correlated_problem), and where it stays off."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
from certify_grids import correlated_problem, synthetic_problem, twin_correlation

from safetyrepro.certify.algorithm import CertifyOptions, certify
from safetyrepro.certify.control import Control
from safetyrepro.cli import main
from safetyrepro.grid.twins import cheap_twin, pairings


def far_ahead(cfg, model):
    return 0.75 if model == "a" else 0.40


def tie(r):
    """The per-seed tie that gives twin correlation r (0.8: greedy 0.8, sampled 0.51; measured below)."""
    return (lambda cfg: 0.8 if cfg.decoding == "greedy" else 0.51) if r else (lambda cfg: 0.0)


def costly(result) -> int:
    return sum(len(v) for (_, cid, _), v in result.evaluated.items() if cid.endswith("/free_form"))


def test_every_free_form_configuration_is_paired_with_its_log_probability_twin():
    ids = ["bbq/T2/moderate/3shot/free_form", "bbq/T2/greedy/3shot/logprob", "bbq/T1/greedy/0shot/free_form"]
    assert cheap_twin(ids[0], ids) == "bbq/T2/greedy/3shot/logprob"
    assert cheap_twin(ids[2], ids) is None and cheap_twin(ids[1], ids) is None  # no twin in the run; not costly
    assert pairings(None, ids) == {ids[0]: ids[1]}
    assert pairings(None, ids, {ids[1]: frozenset({"x"})}) == {}  # a selection skips items of one of them
    assert pairings(0.5, ["crows_pairs/T1/greedy/0shot/logprob"]) == {}
    assert pairings(None, ["c1", "c2"]) == {}  # ids a caller made up are never paired


def test_the_synthetic_grids_correlate_as_the_scenarios_say():
    problem, oracle, _ = correlated_problem(np.random.default_rng(0), far_ahead, tie(0.8), n_items=2000)
    r = twin_correlation(problem, oracle)
    assert len(r) == 36 and 0.75 < np.mean(list(r.values())) < 0.85
    problem, oracle, _ = correlated_problem(np.random.default_rng(0), far_ahead, tie(0), n_items=2000)
    assert abs(np.mean(list(twin_correlation(problem, oracle).values()))) < 0.05


def decided(result) -> set[tuple[str, str]]:
    return {(c.config_id, c.claim) for c in result.claims if c.claim != "undecided"}


@pytest.fixture(scope="module")
def runs():
    """Four 300-item subsets of a 1,500-item pool (the twins score the rest: partners), a model 0.15 ahead
    everywhere, at r = 0.8 and r = 0, certified both ways (cost-aware rounds)."""
    out = {}
    for r in (0.8, 0.0):
        worlds = [
            correlated_problem(np.random.default_rng(50 + g), lead_015, tie(r), n_items=1500, subset=300)
            for g in range(4)
        ]
        for control in ("none", "auto"):
            out[(r, control)] = [
                certify([problem], oracle, CertifyOptions(seed=g, control=control))
                for g, (problem, oracle, _) in enumerate(worlds)
            ]
    return out


def lead_015(cfg, model):
    return 0.65 if model == "a" else 0.50


def test_the_control_makes_no_fewer_claims_for_fewer_costly_evaluations_when_they_correlate(runs):
    """300-item subsets drawn from a larger pool (issue 56): r = 0.8, no grid makes fewer claims with the control,
    and 29 more in all (93 -> 122 decided; per grid 29, 22, 20, 22 -> 31, 33, 26, 32), for 0.80 of the free-form
    evaluations (a claim the plain path made at the subset's last items may be missed: one in two grids; with 50
    partner items from the subset's back, before their 2.5 % cap, 31 more for 0.78); r = 0, the same claims for at
    most 10 % more (1.000): the paths stay plain."""
    for r, most in ((0.8, 0.85), (0.0, 1.10)):
        none, auto = runs[(r, "none")], runs[(r, "auto")]
        for x, y in zip(none, auto, strict=True):  # a claim at the subset's last items may fall either way
            assert len(decided(x)) <= len(decided(y)) and len(decided(x) - decided(y)) <= 1
        assert sum(map(costly, auto)) <= most * sum(map(costly, none)), (sum(map(costly, auto)), sum(map(costly, none)))
    gained = sum(len(decided(y)) - len(decided(x)) for x, y in zip(runs[(0.8, "none")], runs[(0.8, "auto")]))
    assert gained >= 27
    assert sum(x.control["truthfulqa"]["partner_steps"] for x in runs[(0.8, "auto")]) > 200
    assert sum(x.control["truthfulqa"]["partner_steps"] for x in runs[(0.0, "auto")]) < 100
    assert all(x.control["truthfulqa"]["pool_beyond_subset"] == 1200 for x in runs[(0.8, "auto")])


def test_a_path_reads_the_front_for_costly_items_and_the_back_for_partners_and_waits_for_missing_scores():
    """White box on 40 items: a path takes the costly items from the front and, once its past asks, k cheap
    items a step from the back, never the same item both ways; it waits (takes no step) while a score it needs
    is missing, and `needs` names exactly the items it will read next."""
    rng = np.random.default_rng(5)
    order = np.array([f"i{k:02d}" for k in range(40)], dtype=object)
    cheap_a = (rng.random(40) < 0.8).astype(float)
    cheap_b = (rng.random(40) < 0.3).astype(float)
    costly_a = np.where(rng.random(40) < 0.9, cheap_a, 1 - cheap_a)
    cache = {
        ("bbq", "bbq/T1/greedy/0shot/free_form", "a"): dict(zip(order, costly_a, strict=True)),
        ("bbq", "bbq/T1/greedy/0shot/free_form", "b"): dict(zip(order, cheap_b, strict=True)),
        ("bbq", "bbq/T1/greedy/0shot/logprob", "a"): dict(zip(order[:5], cheap_a[:5], strict=True)),
        ("bbq", "bbq/T1/greedy/0shot/logprob", "b"): dict(zip(order, cheap_b, strict=True)),
    }
    twins = {"bbq/T1/greedy/0shot/free_form": "bbq/T1/greedy/0shot/logprob"}
    control = Control("bbq", twins, order, [("a", "b")], 0.4, 0.05)  # a lax level: partners pay on 40 items
    control.catch_up(cache)
    assert control.pos[0] == 5  # a's cheap score on the sixth item is missing: the path waits there
    prefix, extra = control.needs("bbq/T1/greedy/0shot/free_form", 0, 20)
    assert prefix == [("a", "bbq/T1/greedy/0shot/logprob", 20), ("b", "bbq/T1/greedy/0shot/logprob", 20)]
    cache[("bbq", "bbq/T1/greedy/0shot/logprob", "a")] = dict(zip(order, cheap_a, strict=True))
    control.catch_up(cache)
    back, pos = int(control.back[0]), int(control.pos[0])
    assert back > 0 and pos + back <= 40 and pos == control.limit("bbq/T1/greedy/0shot/free_form", 0)
    assert control.bank.partner_steps[0] >= back / control.k and control.bank.t[0] == pos
    # the partners were the back of the order, in order: what the next step would take comes just before them
    want = int(control.want[0])
    assert control._partners(0) == list(order[max(40 - back - want, pos + 1) : 40 - back][::-1])


def test_the_control_is_off_for_a_held_only_reread_and_none_and_on_for_both_targets():
    problem, oracle, _ = correlated_problem(np.random.default_rng(1), far_ahead, tie(0.8), n_items=60)
    small = dataclasses.replace(problem, config_ids=problem.config_ids[:8])
    for options in (CertifyOptions(control="none"), CertifyOptions(control="auto", held_only=True)):
        assert certify([small], oracle, options).control == {}
    assert certify([small], oracle, CertifyOptions(control="auto")).control != {}
    subset = certify([small], oracle, CertifyOptions(control="auto", target="subset")).control["truthfulqa"]
    assert subset["controlled_steps"] > 0 and "partner_steps" not in subset  # the twin's whole subset instead
    with pytest.raises(ValueError, match="control"):
        certify([small], oracle, CertifyOptions(control="always"))


def test_uncorrelated_configurations_keep_the_plain_claims():
    """synthetic_problem's configurations share only an item difficulty: the control takes (almost) no partner
    step and the claims are those of --control none."""
    problem, oracle, _ = synthetic_problem(np.random.default_rng(4), far_ahead, n_items=120)
    none = certify([problem], oracle, CertifyOptions(seed=1, control="none"))
    auto = certify([problem], oracle, CertifyOptions(seed=1, control="auto"))
    assert auto.control["truthfulqa"]["partner_steps"] <= 5
    assert [c.claim for c in auto.claims] == [c.claim for c in none.claims]


def test_the_flag_reaches_cost_json(tmp_path, capsys):
    """`--control auto` on a replay: cost.json says so and what it did, for either target; a bad value is
    argparse's refusal."""
    from certify_grids import synthetic_run

    grid, items = synthetic_run(np.random.default_rng(0), far_ahead, n_items=40)
    grid = grid[grid["template"] == "T1"]
    items = items[items["config_id"].isin(set(grid["config_id"]))]
    grid.to_csv(tmp_path / "grid.csv", index=False)
    items.to_parquet(tmp_path / "items.parquet")
    base = ["certify", "--replay", str(tmp_path / "items.parquet"), "--grid", str(tmp_path / "grid.csv"), "--quiet"]
    assert main([*base, "--control", "auto", "--out", str(tmp_path / "auto")]) == 0
    # no twin item beyond the 40 every configuration holds: the user is told the control can save little, and how
    no_pool = "truthfulqa: The twins held no items beyond the costly subset, so partners came from the subset's own"
    assert no_pool in capsys.readouterr().err
    assert "The twins held no items beyond the costly subset" in (tmp_path / "auto" / "report.md").read_text()
    cost = json.loads((tmp_path / "auto" / "cost.json").read_text())
    split = cost["model_evaluations_by_scoring"]  # the free-form (costly) evaluations a control saves, apart
    assert split["free_form"] > 0 and split["other"] == 0
    assert split["free_form"] + split["logprob"] == cost["model_evaluations"]
    assert cost["control"] == "auto" and set(cost["control_did"]["truthfulqa"]["pairs"]) == {
        c for c in grid["config_id"].unique() if c.endswith("/free_form")
    }
    assert main([*base, "--out", str(tmp_path / "none")]) == 0
    assert json.loads((tmp_path / "none" / "cost.json").read_text())["control"] == "none"
    capsys.readouterr()
    assert main([*base, "--control", "auto", "--target", "subset", "--out", str(tmp_path / "subset")]) == 0
    assert "--control auto does nothing" not in capsys.readouterr().err
    did = json.loads((tmp_path / "subset" / "cost.json").read_text())["control_did"]["truthfulqa"]
    assert did["costly_steps"] > 0 and "partner_steps" not in did
    assert (
        "with the control, the twins scored on their whole subsets" in (tmp_path / "subset" / "report.md").read_text()
    )
    assert main([*base, "--control", "time", "--out", str(tmp_path / "time")]) == 0
    assert "--control time acts as --control auto here: a replay knows no item costs" in capsys.readouterr().err
    assert json.loads((tmp_path / "time" / "cost.json").read_text())["control"] == "time"
    with pytest.raises(SystemExit):
        main([*base, "--control", "sometimes", "--out", str(tmp_path / "bad")])


def test_a_replay_whose_twins_hold_more_items_gives_the_control_its_partners_there(tmp_path, capsys):
    """A twin swept on more of the benchmark than its free-form configurations (issue 56): replay certifies the
    items every configuration holds and hands the twins' other items to the control as its pool, says so, and
    cost.json counts them; the free-form configurations' items are never partners."""
    from certify_grids import synthetic_run

    grid, items = synthetic_run(np.random.default_rng(0), far_ahead, n_items=120)
    grid = grid[grid["template"] == "T1"]
    items = items[items["config_id"].isin(set(grid["config_id"]))]
    costly_ids = items["config_id"].str.endswith("/free_form")
    items = items[~costly_ids | (items["item_id"] < "truthfulqa/0080")]  # the free-form cells hold 80 items
    kept = items.groupby(["model", "config_id"])["item_score"].agg(["mean", "size"])
    for (model, cid), row in kept.iterrows():  # the grid as the sweep of those cells writes it
        at = (grid["model"] == model) & (grid["config_id"] == cid)
        grid.loc[at, "score"], grid.loc[at, "n_items"] = row["mean"], row["size"] // grid.loc[at, "n_seeds"]
    grid.to_csv(tmp_path / "grid.csv", index=False)
    items.to_parquet(tmp_path / "items.parquet")
    argv = ["certify", "--replay", str(tmp_path / "items.parquet"), "--grid", str(tmp_path / "grid.csv")]
    assert main([*argv, "--control", "auto", "--out", str(tmp_path / "auto")]) == 0
    err = capsys.readouterr().err
    assert "the 80 items every model has on every configuration" in err
    assert "held no items beyond the costly subset" not in err
    assert "the cheap twins hold 40 items beyond those" in err
    did = json.loads((tmp_path / "auto" / "cost.json").read_text())["control_did"]["truthfulqa"]
    assert did["pool_beyond_subset"] == 40
    used = pd.read_parquet(tmp_path / "auto" / "items.parquet")
    free_form = used[used["config_id"].str.endswith("/free_form")]
    assert free_form["item_id"].max() < "truthfulqa/0080"


def test_control_time_reads_the_costs_and_takes_fewer_partners_for_less_model_time():
    """`--control time` with the costs known (a live run's): a twin item at a tenth of a greedy free-form one, so a
    step takes a few partners where auto takes up to 16, and over four grids (T1's greedy configurations, a 0.15
    lead, 2,000 of 6,000 items) less model time than auto and than no control (7,982 against 9,499 and 8,789; a
    single grid may go either way); with the costs unknown (a replay) it is auto, step for step."""
    from certify_grids import CostedOracle

    did, spent = {}, {"none": 0.0, "auto": 0.0, "time": 0.0}
    for seed in range(400, 404):
        problem, oracle, _ = correlated_problem(
            np.random.default_rng(seed), lead_015, tie(0.8), n_items=6000, subset=2000
        )
        keep = tuple(c for c in problem.config_ids if c.split("/")[1] == "T1" and c.split("/")[2] == "greedy")
        problem = dataclasses.replace(problem, config_ids=keep)
        for control in spent:
            for known in (True, False) if seed == 400 and control != "none" else (True,):
                costed = CostedOracle(oracle, known=known)
                result = certify([problem], costed, CertifyOptions(seed=0, control=control, round_seconds=60.0))
                if known:
                    spent[control] += costed.spent()
                if seed == 400:
                    did[(control, known)] = (result.control.get("truthfulqa"), costed.spent())

    def per_step(d):  # both models score each partner item
        return d["partner_items_evaluated"] / 2 / d["partner_steps"]

    assert 1 <= per_step(did[("time", True)][0]) <= 6 < per_step(did[("auto", True)][0]), did
    assert spent["time"] < min(spent["auto"], spent["none"]), spent
    assert did[("time", False)] == did[("auto", False)]


def test_the_control_says_how_well_the_twins_tracked_the_free_form_differences():
    """cost.json's twin_r_median and report.md's words: at r = 0.8 (greedy configurations, a 0.15 lead, a pool)
    the paths read about 0.8; at r = 0 every path finds no correlation and goes on without its twin."""
    from certify_grids import greedy_short

    from safetyrepro.certify.outputs import _control_lines

    def lead_015(cfg, model):
        return 0.65 if model == "a" else 0.50

    for r in (0.8, 0.0):
        problem, oracle, _ = correlated_problem(np.random.default_rng(400), lead_015, tie(r), n_items=6000, subset=2000)
        result = certify([greedy_short(problem)], oracle, CertifyOptions(seed=0, control="auto"))
        did, line = result.control["truthfulqa"], _control_lines(result)[1]
        if r:
            assert 0.7 < did["twin_r_median"] < 0.9 and did["twin_kept_paths"] == 4 and did["twin_dropped_paths"] == 0
            assert f"the twins tracked the free-form differences at a median r = {did['twin_r_median']:.2f}" in line
        else:
            assert did["twin_r_median"] is None and did["twin_dropped_paths"] == 4
            assert "4 found no correlation with their twins and went on without them" in line
