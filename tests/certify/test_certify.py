"""`safetyrepro certify replay`: what it certifies, what it costs, and that its error control holds.

The acceptance cases of docs/certify.md on 300-item synthetic grids built as a sweep builds them (two
models, TruthfulQA's 48 configurations, 5-seed means on sampled configurations)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from certify_grids import synthetic_problem, synthetic_run

from safetyrepro.certify.algorithm import (
    BenchmarkProblem,
    CertifyOptions,
    certify,
    claim_of,
    pair_decision,
)
from safetyrepro.certify.replay import contradicted, load_replay
from safetyrepro.cli import main
from safetyrepro.grid.grid_io import common_configurations, validate_cells
from safetyrepro.sequential.confidence_sequence import GROWTH_TRUNCATION, IidBettingCS, WorBettingCS
from safetyrepro.tasks.envelope import default_rules

RULES = default_rules()


def far_ahead(cfg, model):
    return 0.8 if model == "a" else 0.35


def reverses_with_template(cfg, model):
    ahead = cfg.template in ("T1", "T2")
    return (0.75 if model == "a" else 0.4) if ahead else (0.4 if model == "a" else 0.75)


def _files(tmp_path, acc, seed=1, n_items=300):
    grid, items = synthetic_run(np.random.default_rng(seed), acc, n_items)
    grid.to_csv(tmp_path / "grid.csv", index=False)
    items.to_parquet(tmp_path / "items.parquet")
    return tmp_path / "grid.csv", tmp_path / "items.parquet"


def _certify(tmp_path, capsys, acc, *extra, seed=1):
    grid, items = _files(tmp_path, acc, seed)
    out = tmp_path / "out"
    rc = main(
        [
            "certify",
            "--replay",
            str(items),
            "--grid",
            str(grid),
            "--alpha",
            "0.05",
            "--delta",
            "0.05",
            "--seed",
            str(seed),
            "--out",
            str(out),
            "--quiet",
            *extra,
        ]
    )
    assert rc == 0, capsys.readouterr().err
    return out


@pytest.mark.parametrize("target", ["population", "subset"])
def test_one_model_far_ahead_everywhere_is_stable_at_under_30_percent(tmp_path, capsys, target):
    out = _certify(tmp_path, capsys, far_ahead, "--target", target)
    cert = pd.read_csv(out / "certificate.csv").iloc[0]
    assert (cert["model_a"], cert["model_b"], cert["verdict"], cert["target"]) == ("a", "b", "stable_a", target)
    assert cert["n_full"] == 48 * 300 and cert["n_evaluations"] <= 0.30 * cert["n_full"]
    claims = pd.read_csv(out / "claims.csv")
    assert len(claims) == 48 and (claims["claim"] == "a_better").all() and (claims["target"] == target).all()
    # subset: the union bound's own interval decides; population: the closed test can decide a claim before
    # the simultaneous interval (at the union bound's level) clears 0, never against it
    assert (
        (claims["lower"] > 0).all() if target == "subset" else ((claims["upper"] > 0) & (claims["estimate"] > 0)).all()
    )
    cost = json.loads((out / "cost.json").read_text())
    assert cost["paired_evaluations"] == cert["n_evaluations"] and cost["full_paired_evaluations"] == 14400
    used = pd.read_parquet(out / "items.parquet")
    assert set(used.columns) >= {"model", "config_id", "item_id", "seed", "item_score"}
    # every item a claim used is in items.parquet, for both models, all seeds of a sampled configuration
    per = used.groupby(["config_id", "model"])["item_id"].nunique().unstack()
    assert (per["a"] == per["b"]).all()
    assert per["a"].sum() == cert["n_evaluations"]
    sampled = used[used["config_id"].str.contains("/diverse/")]
    assert set(sampled.groupby(["config_id", "model", "item_id"]).size()) == {5}
    report = (out / "report.md").read_text()
    assert "truthfulqa: a is ahead of b wherever the envelope goes: ahead on 48 of 48 configurations" in report


@pytest.mark.parametrize("target", ["population", "subset"])
def test_a_lead_that_reverses_between_templates_is_a_flip_at_under_50_percent(tmp_path, capsys, target):
    out = _certify(tmp_path, capsys, reverses_with_template, "--target", target)
    cert = pd.read_csv(out / "certificate.csv").iloc[0]
    assert cert["verdict"] == "flip" and cert["n_evaluations"] <= 0.50 * cert["n_full"]
    claims = pd.read_csv(out / "claims.csv").set_index("config_id")
    deciding = cert["deciding_configs"].split(";")
    for cid in deciding:  # each decided win is on the side its template says
        ahead = cid.split("/")[1] in ("T1", "T2")
        assert claims.at[cid, "claim"] == ("a_better" if ahead else "b_better")
    assert {claims.at[c, "claim"] for c in deciding} == {"a_better", "b_better"}


def test_claims_and_verdicts_by_hand():
    assert claim_of(0.01, 0.3, False, 0.1, 0.05) == "a_better"
    assert claim_of(-0.3, -0.01, False, -0.1, 0.05) == "b_better"
    assert claim_of(-0.04, 0.049, False, 0.0, 0.05) == "within_delta"
    assert claim_of(-0.06, 0.02, False, 0.0, 0.05) == "undecided"
    assert claim_of(0.0, 0.0, True, 0.0, 0.05) == "within_delta"  # every item drawn, a tie
    assert claim_of(0.0, 0.0, True, -1 / 300, 0.05) == "b_better"
    assert pair_decision(["a_better", "undecided", "b_better"]) == "flip"
    assert pair_decision(["a_better", "within_delta"]) == "stable_a"
    assert pair_decision(["a_better", "undecided"]) == "undecided"
    assert pair_decision(["within_delta", "within_delta"]) == "equivalent"


def _reference_bounds(y: np.ndarray, population: int, alpha: float, grid: np.ndarray) -> tuple[float, float]:
    """The hedged betting CS without replacement, written out candidate by candidate from Waudby-Smith &
    Ramdas (2020, 2024): growth-rate plug-in stakes (aGRAPA: the Kelly fraction from the plug-in mean and variance),
    truncation c/m_t with c = 0.9, theta = 1/2, running intersection."""
    alive = np.ones(len(grid), dtype=bool)
    for j, m in enumerate(grid):
        k_plus = k_minus = 1.0
        mu_sum, var_sum, total = 0.5, 0.25, 0.0
        for t, yt in enumerate(y, start=1):
            mu_hat, sigma2 = mu_sum / t, var_sum / t
            m_t = (population * m - total) / (population - t + 1)
            if m_t < -1e-12 or m_t > 1 + 1e-12:
                alive[j] = False
                break
            m_t = min(max(m_t, 0.0), 1.0)
            kelly = (mu_hat - m_t) / (sigma2 + (mu_hat - m_t) ** 2)
            lp = min(max(kelly, 0.0), GROWTH_TRUNCATION / m_t) if m_t > 0 else max(kelly, 0.0)
            lm = min(max(-kelly, 0.0), GROWTH_TRUNCATION / (1 - m_t)) if m_t < 1 else max(-kelly, 0.0)
            k_plus *= 1 + lp * (yt - m_t)
            k_minus *= 1 - lm * (yt - m_t)
            if 0.5 * k_plus + 0.5 * k_minus >= 1 / alpha:
                alive[j] = False
                break
            var_sum += (yt - mu_hat) ** 2
            mu_sum += yt
            total += yt
    return float(grid[alive].min()), float(grid[alive].max())


def test_the_confidence_sequence_equals_an_independent_computation():
    rng = np.random.default_rng(3)
    population = rng.choice([-1.0, 0.0, 1.0], size=60, p=[0.2, 0.4, 0.4])
    cs = WorBettingCS(1, 60, 0.01, lattice=1)
    for t in range(25):
        cs.update([0], [population[t]])
    b = cs.bounds()
    lo, hi = _reference_bounds((population[:25] + 1) / 2, 60, 0.01, cs.grid)
    assert (b.lower[0], b.upper[0]) == pytest.approx((2 * lo - 1, 2 * hi - 1), abs=1e-12)
    assert b.lower[0] <= population.mean() <= b.upper[0]
    for t in range(25, 60):
        cs.update([0], [population[t]])
    assert cs.bounds().lower[0] == cs.bounds().upper[0] == pytest.approx(population.mean())


@pytest.mark.parametrize("stakes", ["growth", "width"])
def test_a_bank_fed_every_row_in_order_is_the_bank_fed_them_in_any_order_or_a_few_at_a_time(stakes):
    """Every row in order is read and written as a slice (perf/bench_bank_update.py: 1.2-2.3x faster); the
    capitals must be those of the index-array path bit for bit, and of rows fed one at a time."""
    rng = np.random.default_rng(7)
    draws = rng.choice([-1.0, -0.2, 0.0, 0.6, 1.0], size=(40, 6))
    banks = [IidBettingCS(6, 0.01, -1.0, 1.0, extra=(0.05,), stakes=stakes) for _ in range(3)]
    for d in draws:
        banks[0].update(np.arange(6), d)
        banks[1].update(np.arange(6)[::-1], d[::-1])
        for row in range(6):
            banks[2].update([row], d[row : row + 1])
    for other in banks[1:]:
        for name in ("log_plus", "log_minus", "max_plus", "max_minus", "var_sum", "mu_sum", "t"):
            assert np.array_equal(getattr(banks[0], name), getattr(other, name)), name


def test_the_confidence_sequence_covers_at_every_sample_size():
    """400 populations, alpha 0.1: the share whose sequence ever misses the mean is at most alpha
    (Ville), checked at every t."""
    rng = np.random.default_rng(11)
    pops = rng.choice([-1.0, 0.0, 1.0], size=(400, 80), p=[0.3, 0.3, 0.4])
    cs = WorBettingCS(400, 80, 0.1, lattice=1)
    missed = np.zeros(400, dtype=bool)
    for t in range(80):
        cs.update(np.arange(400), pops[:, t])
        b = cs.bounds()
        truth = pops.mean(axis=1)
        missed |= (truth < b.lower - 1e-12) | (truth > b.upper + 1e-12)
    assert missed.mean() <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 400)


def _controlled_run(cs: WorBettingCS, d: np.ndarray, c: np.ndarray, steps: int, warm_up: int = 10) -> np.ndarray:
    """Feed every stream the first `steps` items of its population in order, with the control (SubsetControl's:
    gamma the least-squares slope of D on C over the earlier draws, C's mean over the items not yet drawn
    known) from `warm_up` on; per stream, whether its bounds ever missed the population mean."""
    streams, n = d.shape
    truth = d.mean(axis=1)
    missed = np.zeros(streams, dtype=bool)
    for t in range(steps):
        if t < warm_up:
            cs.update(np.arange(streams), d[:, t])
        else:
            rest = (c.sum(axis=1) - c[:, :t].sum(axis=1)) / (n - t)
            cov = (d[:, :t] * c[:, :t]).mean(axis=1) - d[:, :t].mean(axis=1) * c[:, :t].mean(axis=1)
            var = c[:, :t].var(axis=1)
            gamma = np.clip(np.where(var > 1e-9, cov / np.maximum(var, 1e-9), 0.0), -1, 1)
            cs.update(np.arange(streams), d[:, t], gamma, c[:, t] - rest, 1 + np.abs(rest))
        b = cs.bounds()
        missed |= (truth < b.lower - 1e-12) | (truth > b.upper + 1e-12)
    return missed


def _tied(rng, streams: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Populations whose costly D equals the cheap C on 80 % of the items (r about 0.8), else a fresh draw."""
    c = rng.choice([-1.0, 0.0, 1.0], size=(streams, n), p=[0.3, 0.3, 0.4])
    return np.where(rng.random((streams, n)) < 0.8, c, rng.choice([-1.0, 0.0, 1.0], size=(streams, n))), c


def test_the_controlled_sequence_covers_at_every_sample_size_and_is_plain_without_a_control():
    """issue 45, subset target: 400 populations of 80 items with r about 0.8, alpha 0.1: the share whose
    controlled sequence ever misses the population mean is at most alpha, checked at every t; a step with no
    control (span 0) is the plain step bit for bit; a deviation beyond its declared span is refused."""
    d, c = _tied(np.random.default_rng(12), 400, 80)
    missed = _controlled_run(WorBettingCS(400, 80, 0.1, lattice=1), d, c, 80)
    assert missed.mean() <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 400), missed.mean()
    plain, zero = WorBettingCS(3, 80, 0.1, lattice=1), WorBettingCS(3, 80, 0.1, lattice=1)
    for t in range(30):
        plain.update(np.arange(3), d[:3, t])
        zero.update(np.arange(3), d[:3, t], np.zeros(3), np.zeros(3), np.zeros(3))
    assert np.array_equal(plain.log_plus, zero.log_plus) and np.array_equal(plain.alive, zero.alive)
    with pytest.raises(ValueError, match="span"):
        zero.update([0], [0.0], [0.5], [1.5], [1.0])


def test_the_control_narrows_the_sequence_where_d_and_c_correlate():
    """r about 0.8, 200-item populations, alpha 0.05: at item 80 the controlled bounds are narrower than the
    plain ones on at least 90 % of the streams, and narrower by at least a fifth on average."""
    d, c = _tied(np.random.default_rng(13), 100, 200)
    plain, controlled = WorBettingCS(100, 200, 0.05, lattice=1), WorBettingCS(100, 200, 0.05, lattice=1)
    for t in range(80):
        plain.update(np.arange(100), d[:, t])
    _controlled_run(controlled, d, c, 80)
    wp, wc = (cs.bounds().upper - cs.bounds().lower for cs in (plain, controlled))
    assert (wc < wp).mean() >= 0.9 and wc.mean() <= 0.8 * wp.mean(), (wc.mean(), wp.mean())


def test_a_budget_stops_the_run_and_leaves_the_rest_undecided(tmp_path, capsys):
    out = _certify(tmp_path, capsys, reverses_with_template, "--budget", "100")  # the flip needs about 250
    cost = json.loads((out / "cost.json").read_text())
    assert cost["paired_evaluations"] <= 100 and cost["stopped_by"] == "budget"
    assert pd.read_csv(out / "certificate.csv")["verdict"].iloc[0] == "undecided"
    report = (out / "report.md").read_text()
    claims = pd.read_csv(out / "claims.csv")
    open_ = claims[claims["claim"] == "undecided"]
    width = (open_["upper"] - open_["lower"]).min()
    assert "is undecided" in report and len(open_) > 1
    assert f"their simultaneous bounds are {width:.2f} to " in report  # what the items used could detect
    said = f"so on these items a lead under about {width / 2:.2f} is not claimed in any of them"
    assert f"{said}." in report
    assert (
        f": undecided ({cost['paired_evaluations']:,} of 14,400 paired evaluations); their simultaneous bounds are "
        in (printed := capsys.readouterr().out)
        and printed.splitlines()[0].endswith(said)
    )  # the console's verdict line says it too


@pytest.mark.parametrize(
    "args, message",
    [(["--budget", "abc"], "--budget"), (["--alpha", "1.5"], "--alpha"), (["--delta", "-1"], "--delta")],
)
def test_bad_settings_are_one_line(tmp_path, capsys, args, message):
    grid, items = _files(tmp_path, far_ahead, n_items=20)
    rc = main(["certify", "--replay", str(items), "--grid", str(grid), "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def _problem(acc, seed, n_items):
    grid, items = synthetic_run(np.random.default_rng(seed), acc, n_items)
    g = common_configurations(validate_cells(grid, RULES, "synthetic"), "synthetic", RULES)
    return g, items


@pytest.mark.slow
def test_claims_the_full_subset_contradicts_are_at_most_alpha_of_the_grids():
    """Calibration: 200 grids of 300 items, 100 under the null (the two models identical in every
    configuration) and 100 under partial nulls (identical on half the configurations, 5 points apart on
    the others). A grid fails when any claim contradicts its full subset; at alpha 0.05 failures are at
    most 5 % of the grids plus three Monte Carlo standard errors."""
    failed, n = 0, 200
    for k in range(n):
        if k % 2 == 0:

            def acc(cfg, model):
                return 0.55
        else:

            def acc(cfg, model):
                return 0.55 + (0.05 if model == "a" and cfg.template in ("T1", "T3") else 0.0)

        problem, oracle, full = synthetic_problem(np.random.default_rng(1000 + k), acc, 300)
        result = certify([problem], oracle, CertifyOptions(alpha=0.05, delta=0.05, seed=k, target="subset"))
        failed += any(contradicted(c.claim, full[c.config_id], 0.05) for c in result.claims)
    assert failed / n <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)


def test_the_same_draw_through_files_and_in_memory_gives_the_same_certificate(tmp_path):
    """synthetic_problem is synthetic_run without the files: same items, same verdicts."""
    problem, oracle, full = synthetic_problem(np.random.default_rng(7), reverses_with_template, 60)
    in_memory = certify([problem], oracle, CertifyOptions(seed=7))
    g, items = _problem(reverses_with_template, 7, 60)
    items.to_parquet(tmp_path / "items.parquet")
    replay = load_replay(tmp_path / "items.parquet", g)
    assert {k[1]: v for k, v in replay.full_delta.items()} == full
    on_disk = certify(replay.problems, replay.oracle, CertifyOptions(seed=7))
    assert [(c.config_id, c.claim, c.items_used) for c in in_memory.claims] == [
        (c.config_id, c.claim, c.items_used) for c in on_disk.claims
    ]


def test_problem_shape_is_checked():
    with pytest.raises(ValueError):
        certify(
            [BenchmarkProblem("truthfulqa", ("c",), ("a", "b"), ("i",))],
            lambda *a: np.zeros(1),
            CertifyOptions(allocation="random"),
        )


def test_labels_in_the_reports_sentences_are_escaped(tmp_path, capsys):
    """A model label is the user's text: in report.md's verdict sentences raw HTML and links are escaped."""
    models = ("<script>alert(1)</script>", "[click](javascript:alert(1))")
    grid, items = synthetic_run(np.random.default_rng(2), lambda cfg, m: 0.8 if m == models[0] else 0.35, 60, models)
    grid.to_csv(tmp_path / "grid.csv", index=False)
    items.to_parquet(tmp_path / "items.parquet")
    rc = main(
        ["certify", "--replay", str(tmp_path / "items.parquet"), "--grid", str(tmp_path / "grid.csv")]
        + ["--out", str(tmp_path / "out"), "--quiet"]
    )
    assert rc == 0, capsys.readouterr().err
    report = (tmp_path / "out" / "report.md").read_text()
    sentences = [line for line in report.splitlines() if line.startswith("- truthfulqa:")]
    raw = re.compile(r"(?<!\\)<script>|(?<!\\)\]\(javascript:")  # unescaped: no backslash before it
    assert sentences and not any(raw.search(s) for s in sentences)
    assert "\\<script>alert(1)\\</script>" in sentences[0] and "\\[click\\](javascript:alert(1))" in sentences[0]


def test_the_direction_is_an_input_and_an_unknown_benchmark_is_refused_not_read_as_higher_is_better():
    """Issue 55: certify's problems carry their direction. Left out, the benchmark's definition gives it (CrowS-Pairs:
    closer to 0.5); a name the registry does not know is refused rather than read as higher-is-better; said
    outright, it is used as given, for a task of the user's own."""
    from safetyrepro.errors import UserError

    assert BenchmarkProblem("crows_pairs", ("c",), ("a", "b"), ("i",)).closer_to == 0.5
    assert BenchmarkProblem("bbq", ("c",), ("a", "b"), ("i",)).closer_to is None
    with pytest.raises(UserError, match="no_such_task"):
        BenchmarkProblem("no_such_task", ("c",), ("a", "b"), ("i",))
    mine = BenchmarkProblem("no_such_task", ("c1",), ("a", "b"), tuple(f"i{k}" for k in range(40)), 1, ideal=None)
    run = certify([mine], lambda b, c, m, ids: np.full(len(ids), float(m == "a")), CertifyOptions(order="subset"))
    (pair,) = run.pairs
    assert (pair.benchmark, pair.verdict) == ("no_such_task", "stable_a")


def test_the_growth_rate_bounds_cover_the_mean_at_every_sample_size():
    """IidBettingCS with its default growth-rate stakes (issue 56), whose capitals need not be monotone in the
    candidate: 1,000 streams of i.i.d. draws from a skewed law with mean 0.32, each side at 0.05; the share whose
    bounds ever miss the mean, read at every t, is at most 0.1 (Ville, each side): 0.036 measured (the width-tuned
    stakes: 0.040), and the final width 0.238 (0.240)."""
    from safetyrepro.sequential.confidence_sequence import IidBettingCS

    rng = np.random.default_rng(5)
    values, law = np.array([-1.0, -0.2, 0.4, 1.0]), np.array([0.1, 0.2, 0.4, 0.3])
    mean = float(values @ law)
    cs = IidBettingCS(1000, 0.05, extra=(0.0, mean))
    missed = np.zeros(1000, dtype=bool)
    for _ in range(200):
        cs.update(np.arange(1000), rng.choice(values, size=1000, p=law))
        lo, hi = cs.bounds(0.05)
        missed |= (mean < lo - 1e-12) | (mean > hi + 1e-12)
    assert mean == pytest.approx(0.32) and missed.mean() <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 1000)
    assert (hi - lo).mean() < 0.25
    with pytest.raises(ValueError, match="stakes"):
        IidBettingCS(1, 0.05, stakes="kelly")
    with pytest.raises(ValueError, match="cell_log_e needs"):
        IidBettingCS(1, 0.05).cell_log_e()


def test_a_pool_beyond_the_subset_that_holds_subset_items_is_refused():
    with pytest.raises(ValueError, match="pool beyond the subset holds items of the subset"):
        BenchmarkProblem("bbq", ("c",), ("a", "b"), ("i1", "i2"), 1, pool=("i2", "i3"))
