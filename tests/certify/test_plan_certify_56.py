"""`plan --certify` (issue 56): the items certify's population sequences need to claim a lead, simulated on the very
sequences certify runs, agree with certify itself run on synthetic pairs of models with that lead (checked against
simulation), and stand beside the fixed-n test's items for the same power."""

from __future__ import annotations

import json

import numpy as np
import pytest
from refusals import refused

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.cli import main
from safetyrepro.sequential.planning import (
    closeness_items_to_decide,
    controlled_items_to_decide,
    draw_paired,
    items_to_decide,
    kelly_items,
    paired_cells,
    seed_mean_law,
    twin_copy,
    twin_law,
    z_items_needed,
)

D, E, POOL, RUNS = 0.6, 0.35, 1000, 60


def _certified_items(seed: int, effect: float = E, seeds: int = 1, delta: float | None = None) -> float:
    """One certify run (population target, one configuration, items one at a time) on two models whose answers
    differ on a share D of items, A's way on (D + E) / 2, each item's score the mean of `seeds` such answers (a
    sampled configuration's): the items it used to claim A's lead."""
    rng = np.random.default_rng(seed)
    u = rng.random((seeds, POOL))
    a = np.where(u < (D + effect) / 2, 1.0, np.where(u < D, 0.0, (u > (1 + D) / 2).astype(float)))
    b = np.where(u < (D + effect) / 2, 0.0, np.where(u < D, 1.0, a))
    ids = tuple(f"i{k}" for k in range(POOL))
    scores = {"a": dict(zip(ids, a.mean(axis=0))), "b": dict(zip(ids, b.mean(axis=0)))}
    problem = BenchmarkProblem("my_task", ("c",), ("a", "b"), ids, seeds, ideal=None)
    result = certify(
        [problem],
        lambda bm, c, m, items: np.array([scores[m][i] for i in items]),
        CertifyOptions(batch=1, seed=seed, **({} if delta is None else {"delta": delta})),
    )
    (claim,) = result.claims
    if delta is not None:  # two models alike: "within", or (at most alpha of the runs) a false lead
        return claim.items_used if claim.claim == "within_delta" else np.nan
    assert claim.claim == "a_better"
    return claim.items_used


def test_the_planned_items_agree_with_certify_run_on_that_lead():
    planned = items_to_decide(D, E, family=1, runs=400, max_items=POOL)
    measured = np.array([_certified_items(seed) for seed in range(RUNS)])
    assert abs(np.median(measured) / planned.quantile(0.5) - 1) < 0.2, (np.median(measured), planned.quantile(0.5))
    assert abs(np.quantile(measured, 0.8) / planned.quantile(0.8) - 1) < 0.25


def test_the_planned_items_for_five_seed_means_agree_with_certify_run_on_them():
    """`plan --certify --seeds 5`: a 0.15 lead per seed on five-seed means, planned against certify itself (median
    54 planned, 50 measured; 80th percentile 80 and 77)."""
    planned = items_to_decide(D, 0.15, family=1, runs=400, max_items=POOL, seeds=5)
    measured = np.array([_certified_items(seed, 0.15, seeds=5) for seed in range(RUNS)])
    assert abs(np.median(measured) / planned.quantile(0.5) - 1) < 0.2, (np.median(measured), planned.quantile(0.5))
    assert abs(np.quantile(measured, 0.8) / planned.quantile(0.8) - 1) < 0.25


def test_plan_certify_for_two_models_alike_plans_within_alone_and_agrees_with_certify(capsys):
    """`--effect 0 --margin M`: no difference to find, so no fixed-n line; the items to "within +-0.25" at D = 0.6
    agree with certify run on two models alike (median 126 planned, 126.5 measured; 80th percentile 174 and
    170; 2 of the 60 runs made a false lead, alpha 0.05); and a difference outside the margin is never within it."""
    argv = ["plan", "--certify", "--discordance", "0.6", "--configs", "1", "--effect", "0", "--margin", "0.25"]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert "items_needed" not in r and "lead" not in r["certify"]
    planned = r["certify"]["within"]
    measured = np.array([_certified_items(seed, 0.0, delta=0.25) for seed in range(RUNS)])
    assert np.isnan(measured).sum() <= 3
    measured = measured[~np.isnan(measured)]
    assert abs(np.median(measured) / planned["median"] - 1) < 0.2, (np.median(measured), planned)
    assert abs(np.quantile(measured, 0.8) / planned["p80"] - 1) < 0.25
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("certify (population target") and f"after a median of {planned['median']}" in out
    assert main([*argv[:-3], "0.25", "--margin", "0.2"]) == 0
    assert "when the true difference is 25: never: the difference is not inside +-20" in capsys.readouterr().out


def test_plan_certify_prints_its_items_beside_the_fixed_n_test(capsys):
    argv = ["plan", "--certify", "--discordance", "0.6", "--configs", "48", "--effect", "0.25", "--items", "300"]
    assert main([*argv, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    lead, flip = r["certify"]["lead"], r["certify"]["flip"]
    assert r["items_needed"] == 164  # the fixed-n exact sign test with Holm at 80 % power
    assert 140 <= lead["median"] <= 200 and lead["p80"] > r["items_needed"]  # anytime validity has a price
    assert flip["median"] > lead["median"] and 0 < lead["share_within_items"] <= 1
    assert r["certify"]["lead_knowing_the_law"]["median"] < lead["median"]  # the bound on any stake
    assert main(argv) == 0
    assert "the fixed-n test above needs 164 items for 80 % power" in capsys.readouterr().out


def test_the_seed_mean_law_is_worked_out_by_hand_for_two_seeds():
    # per seed: -1, 0, 1 with chances 0.1, 0.6, 0.3 (D 0.4, E 0.2); the mean of two seeds takes -1, -1/2, 0, 1/2, 1
    values, probs = seed_mean_law(0.4, 0.2, 2)
    assert values.tolist() == [-1.0, -0.5, 0.0, 0.5, 1.0]
    assert np.allclose(probs, [0.01, 0.12, 0.42, 0.36, 0.09])
    # the z-test's items: sd of the 2-seed mean is sqrt(0.2 / 2 - 0) ... computed: var = E[x^2] - E[x]^2
    var = probs @ values**2 - (probs @ values) ** 2
    assert np.isclose(var, (0.4 - 0.2**2) / 2)  # a seed's variance D - E^2, halved by two independent seeds
    # one configuration: z_{0.975} = 1.95996, z_{0.8} = 0.84162; n = ((1.95996 + 0.84162) * sqrt(0.18) / 0.2)^2
    assert z_items_needed(0.4, 0.2, 2, 1, 0.05, 0.8) == 36  # 35.3, rounded up


def test_plan_certify_for_five_seed_means_beside_the_z_test(capsys):
    argv = ["plan", "--certify", "--discordance", "0.5", "--configs", "48", "--effect", "0.15", "--items", "300"]
    assert main([*argv, "--seeds", "5", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["certify"]
    assert c["seeds"] == 5 and c["z_items_needed"] == 73  # perf/certify_items_to_decision.md's fixed-n column
    # the table's certify cell for five-seed means at a 0.15 lead: a median of 91 items, every run within 300
    assert 75 <= c["lead"]["median"] <= 110 and c["lead"]["share_within_items"] == 1.0
    assert main([*argv, "--seeds", "5"]) == 0
    out = capsys.readouterr().out
    assert "item scores the mean of 5 seeds" in out and "z-test on 5-seed means (Holm's first step) needs 73" in out
    assert out.startswith("On 0/1 answers (one seed; 5-seed means below): To find a 15-point paired difference")


def test_plan_refuses_flags_it_would_ignore(capsys):
    numbers = ["--discordance", "0.5", "--configs", "48"]
    refused(["plan", *numbers, "--margin", "0.05"], capsys, "--margin", "add --certify")
    refused(["plan", *numbers, "--seeds", "5"], capsys, "--seeds", "add --certify")
    refused(["plan", "--certify", *numbers, "--seeds", "0"], capsys, "--seeds 0", "from 1 to")
    refused(["plan", "study/grid.csv", "--certify", "--twin", "0.8"], capsys, "plan GRID --certify reads", "--twin")


def test_the_bettor_that_knows_the_law_needs_log_threshold_over_its_growth_rate():
    """Kelly at D = 0.5, E = 0.15 on 0/1 answers: the stake (p_a - p_b) / (p_a + p_b) = 0.3 grows the log capital
    0.325 log 1.3 + 0.175 log 0.7 = 0.02285 an item, so by Wald it reaches log(2 x 48 / 0.05) = 7.56 after
    331 items on average, a little more for the last step's overshoot (340 measured)."""
    found = kelly_items(0.5, 0.15, family=48, runs=400, max_items=3000)
    growth = 0.325 * np.log(1.3) + 0.175 * np.log(0.7)
    assert np.isfinite(found.items).all()
    assert 1.0 <= found.items.mean() / (np.log(1920) / growth) < 1.05


def _certified_nearness(seed: int, shares=(0.55, 0.75), agreement=0.7) -> tuple[str, int]:
    """One certify run on a closeness benchmark (ideal 0.5, as CrowS-Pairs; one configuration, items one at a
    time) of two models with those shares of 1 answers, alike on `agreement` of the items: its claim and items."""
    a, b = draw_paired(np.random.default_rng(seed), paired_cells(*shares, agreement), POOL)
    ids = tuple(f"i{j}" for j in range(POOL))
    scores = {"a": dict(zip(ids, a)), "b": dict(zip(ids, b))}
    problem = BenchmarkProblem("my_task", ("c",), ("a", "b"), ids, 1, ideal=0.5)
    result = certify(
        [problem], lambda bm, c, m, items: np.array([scores[m][i] for i in items]), CertifyOptions(batch=1, seed=seed)
    )
    (claim,) = result.claims
    return claim.claim, claim.items_used


def test_the_planned_items_for_a_closeness_benchmark_agree_with_certify_run_on_it():
    """`plan --certify --ideal 0.5`: shares 0.55 and 0.75 of 1 answers (A 15 points nearer 0.5), alike on 0.7 of
    the items, planned on the paired sign test certify runs for CrowS-Pairs: median 103 planned, 93 measured;
    80th percentile 147 and 131 (B nearer, the other null: 103 planned). The cells of the paired answers are
    worked by hand: both 1 on (0.7 - 1 + 0.55 + 0.75) / 2 = 0.5, A alone 0.05, B alone 0.25, neither 0.2."""
    assert paired_cells(0.55, 0.75, 0.7) == pytest.approx([0.5, 0.05, 0.25, 0.2])
    planned = closeness_items_to_decide(0.55, 0.75, 0.7, family=1, runs=400, max_items=POOL)
    runs = [_certified_nearness(seed) for seed in range(RUNS)]
    assert {claim for claim, _ in runs} == {"a_better"}
    measured = np.array([n for _, n in runs])
    assert abs(np.median(measured) / planned.quantile(0.5) - 1) < 0.2, (np.median(measured), planned.quantile(0.5))
    assert abs(np.quantile(measured, 0.8) / planned.quantile(0.8) - 1) < 0.25
    swapped = closeness_items_to_decide(0.75, 0.55, 0.7, family=1, runs=400, max_items=POOL)  # B nearer: NOT_B
    assert abs(swapped.quantile(0.5) / planned.quantile(0.5) - 1) < 0.2


def test_plan_certify_for_a_closeness_benchmark_prints_its_lead_and_flip_and_refuses_what_it_cannot_use(capsys):
    argv = ["plan", "--certify", "--ideal", "0.5", "--shares", "0.55", "0.70", "--agreement", "0.7", "--configs", "12"]
    assert main([*argv, "--items", "300", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["nearer"], r["lead"], r["agreement"]) == ("A", pytest.approx(0.15), 0.7)
    lead, flip = r["certify"]["lead"], r["certify"]["flip"]
    assert 150 <= lead["median"] <= 350 and flip["median"] > lead["median"] and 0 < lead["share_within_items"] < 1
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"- A nearer 0.5 than B by 15 points is claimed after a median of {lead['median']} items" in out
    assert main(argv[:-4] + ["--configs", "12"]) == 0  # no --agreement: as if independent, 0.55 x 0.7 + 0.45 x 0.3
    assert "alike on 0.52 of items" in capsys.readouterr().out
    refused(["plan", *argv[2:]], capsys, "--ideal plans certify's paired sign test")  # without --certify
    refused([*argv, "--effect", "0.1"], capsys, "(not --effect)")
    refused([*argv, "--discordance", "0.3"], capsys, "(not --discordance)")
    refused(["plan", "--discordance", "0.3", "--configs", "4", "--shares", "0.5", "0.6"], capsys, "add --ideal 0.5")
    refused([*argv[:6], "0.45", *argv[7:]], capsys, "equally near 0.5: no lead to claim")
    refused([*argv[:8], "0.99", *argv[9:]], capsys, "agree on between 0.15 and 0.75 of items, not 0.99")


# -- plan --certify --twin R: the free-form items with certify --control auto --------------------------------------
FREE, TWIN = "my_task/T1/greedy/0shot/free_form", "my_task/T1/greedy/0shot/logprob"


def _answers(rng, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two models' 0/1 answers whose paired differences are d (0: both right or both wrong, evenly)."""
    same = (rng.random(len(d)) < 0.5).astype(float)
    return np.where(d == 0, same, (d > 0).astype(float)), np.where(d == 0, same, (d < 0).astype(float))


def _free_form_items(seed: int, control: str, effect: float = 0.25, r: float = 0.8) -> float:
    """One certify run on a free-form configuration and its log-probability twin, scored on 4,000 items beyond the
    1,000-item subset: each item's free-form paired difference is the twin's with chance r, else a fresh draw of
    the same law (discordance D, A's way on (D + effect) / 2): the free-form items it used to claim A's lead."""
    rng = np.random.default_rng(seed)
    subset, n = 1000, 5000

    def draw():
        u = rng.random(n)
        return np.where(u < (D + effect) / 2, 1.0, np.where(u < D, -1.0, 0.0))

    c, fresh = draw(), draw()
    d = np.where(rng.random(n) < r, c, fresh)
    (fa, fb), (la, lb) = _answers(rng, d), _answers(rng, c)
    scores = {(FREE, "a"): fa, (FREE, "b"): fb, (TWIN, "a"): la, (TWIN, "b"): lb}
    ids = [f"i{k}" for k in range(n)]
    at = {i: k for k, i in enumerate(ids)}
    problem = BenchmarkProblem(
        "my_task", (FREE, TWIN), ("a", "b"), tuple(ids[:subset]), 1, ideal=None, pool=tuple(ids[subset:])
    )
    result = certify(
        [problem],
        lambda bm, cid, m, items: scores[(cid, m)][[at[i] for i in items]],
        CertifyOptions(batch=1, seed=seed, control=control),
    )
    (claim,) = [x for x in result.claims if x.config_id == FREE]
    assert claim.claim == "a_better"
    return claim.items_used


def test_the_twins_law_has_the_lead_and_the_correlation_asked():
    """One seed copies the twin's difference with chance r; five seeds copy it with the q that gives their mean
    correlation r: r^2 (1/5 + 4/5 q^2) = q^2, q = 0.8 / sqrt(5 - 0.64 x 4) = 0.51215 (the synthetic grids' 0.51)."""
    assert twin_copy(0.8, 1) == pytest.approx(0.8) and twin_copy(0.8, 5) == pytest.approx(0.8 / np.sqrt(2.44))
    for seeds in (1, 5):
        d, c, w = twin_law(0.5, 0.15, seeds, 0.8)
        assert w.sum() == pytest.approx(1) and w @ d == pytest.approx(0.15) and w @ c == pytest.approx(0.15)
        cov = w @ ((d - 0.15) * (c - 0.15))
        assert cov / np.sqrt((w @ (d - 0.15) ** 2) * (w @ (c - 0.15) ** 2)) == pytest.approx(0.8)


def test_the_planned_free_form_items_with_a_twin_agree_with_certify_run_with_control_auto():
    """D = 0.6, a 0.25 lead, r = 0.8, one configuration and its twin (a family of 2): planned medians 102 without
    and 63 with the twin (80th percentiles 157 and 90); certify measured 103 and 68 (163 and 97) on 200 runs."""
    plain, helped = controlled_items_to_decide(D, 0.25, 0.8, family=2, runs=800, max_items=1000)
    for planned, control in ((plain, "none"), (helped, "auto")):
        measured = np.array([_free_form_items(seed, control) for seed in range(RUNS)])
        assert abs(np.median(measured) / planned.quantile(0.5) - 1) < 0.2, (control, np.median(measured), planned)
        assert abs(np.quantile(measured, 0.8) / planned.quantile(0.8) - 1) < 0.25
    assert helped.quantile(0.5) < 0.75 * plain.quantile(0.5)


def test_plan_certify_with_a_twin_prints_both_and_the_least_share_and_refuses_what_it_cannot_use(capsys):
    argv = ["plan", "--certify", "--discordance", "0.5", "--configs", "48", "--effect", "0.25", "--items", "120"]
    assert main([*argv, "--twin", "0.8", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["certify"]
    tw = c["twin"]
    assert tw["without"] == c["lead"]  # one seed: the same simulated answers as the plain lead's runs
    # growth_ceiling of twin_law(0.5, 0.25, 1, 0.8): 0.589 (no control leaves fewer); the twin leaves 0.65
    assert tw["least_share"] == pytest.approx(0.589, abs=0.005) and tw["least_share"] < tw["share"] < 0.75
    assert tw["with"]["share_within_items"] > 0.7 > 0.5 > c["lead"]["share_within_items"]
    assert main([*argv, "--twin", "0.8"]) == 0
    out = capsys.readouterr().out
    assert (
        "with a log-probability twin correlated 0.8, scored on items beyond the subset (certify --control auto)" in out
    )
    assert f"no control can take fewer than about {tw['least_share']:.2f} of them" in out
    assert main([*argv, "--twin", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["certify"]["twin"]["share"] == pytest.approx(1, abs=0.03)
    refused(["plan", *argv[2:], "--twin", "0.8"], capsys, "--twin", "add --certify")
    refused([*argv, "--twin", "1"], capsys, "--twin 1", "in [0, 1)")
    refused(
        [
            "plan",
            "--certify",
            "--discordance",
            "0.5",
            "--configs",
            "4",
            "--effect",
            "0",
            "--margin",
            "0.1",
            "--twin",
            "0.5",
        ],
        capsys,
        "--twin 0.5",
        "--effect > 0",
    )


def test_docs_certify_quotes_what_plan_certify_twin_prints(capsys):
    """docs/certify.md's `plan --certify --twin` block: its quoted lines are the command's last two, as printed."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "certify.md").read_text(encoding="utf-8")
    block = page.split("$ safetyrepro plan --certify ", 1)[1].split("```", 1)[0].splitlines()
    assert main(["plan", "--certify", *block[0].split()]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == block[2:4] and block[1] == "..."


def test_plan_grid_certify_reads_the_pilots_discordance_and_twin_correlation(capsys, monkeypatch):
    """`plan study/grid.csv --certify --effect 0.25`: per pair, certify's median items at the pilot's discordance
    and K, and with --control auto at the pilot's median twin correlation (the 24-item study: bbq 0.63-0.82,
    toxigen 0.94-0.97); CrowS-Pairs is pointed to --ideal, and a pair whose discordance is under the lead gets none."""
    from pathlib import Path

    import pandas as pd

    from safetyrepro.grid.twins import twin_correlations

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    assert main(["plan", "study/grid.csv", "--certify", "--effect", "0.25", "--json"]) == 0
    rows = {(r["benchmark"], r["model_a"], r["model_b"]): r for r in json.loads(capsys.readouterr().out)}
    twins = twin_correlations(pd.read_parquet(repo / "study/items.parquet"))
    for (benchmark, a, b), r in rows.items():
        if benchmark == "crows_pairs":
            assert r["certify_median"] is None and "plan --certify --ideal 0.5 --shares A B" in r["note"]
            continue
        if r["discordance"] < 0.25:  # toxigen's Qwen vs SmolLM2, 0.178: a 0.25 lead cannot happen
            assert r["certify_median"] is None and r["twin_r"] is None
            continue
        planned = items_to_decide(r["discordance"], 0.25, family=r["configs"], runs=200, max_items=3000)
        assert r["certify_median"] == planned.quantile(0.5)  # the pilot's D and K reach the simulation
        mine = twins[(twins["benchmark"] == benchmark) & (twins["model_a"] == min(a, b))]
        assert r["twin_r"] == pytest.approx(mine[mine["model_b"] == max(a, b)]["r"].median())
        assert 40 <= r["twin_median"] <= 2 * r["certify_median"]
    assert min(r["twin_r"] for (bm, *_), r in rows.items() if bm == "toxigen" and r["twin_r"] is not None) > 0.9
    assert main(["plan", "study/grid.csv", "--certify", "--effect", "0.25"]) == 0
    out = capsys.readouterr().out
    assert "certify for 0.25  with twin (r)" in out
    assert "crows_pairs qwen2.5-coder-0.5b vs smollm2: certify: plan --certify --ideal 0.5 --shares A B" in out


def test_plan_grid_certify_says_when_the_pilot_has_no_twin(tmp_path, capsys):
    """A pilot of log-probability configurations alone: certify's column, no twin column, and a note why."""
    from pathlib import Path

    import pandas as pd

    repo = Path(__file__).resolve().parents[2]
    grid = pd.read_csv(repo / "study/grid.csv")
    grid = grid[(grid["scoring"] == "logprob") & (grid["benchmark"] == "bbq")]
    items = pd.read_parquet(repo / "study/items.parquet")
    grid.to_csv(tmp_path / "grid.csv", index=False)
    items[items["config_id"].isin(set(grid["config_id"]))].to_parquet(tmp_path / "items.parquet")
    assert main(["plan", str(tmp_path / "grid.csv"), "--certify", "--effect", "0.3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3 and all(r["certify_median"] and r["twin_r"] is None for r in rows)
    assert all(
        "no twin: the pilot has no free-form configuration beside its log-probability twin" in r["note"] for r in rows
    )
