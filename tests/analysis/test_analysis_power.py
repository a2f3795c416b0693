"""Power of the paired per-configuration verdict (analysis/paired/power.py) and `safetyrepro plan`: numbers by
hand, against an independent exact enumeration in rational arithmetic, and by Monte Carlo."""

from __future__ import annotations

import gzip
import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from safetyrepro.analysis.paired.power import detectable_difference, items_needed, pilot_discordance, power
from safetyrepro.cli import main
from safetyrepro.errors import UserError


# -- an independent reference: every (M, W) outcome, exact fractions ------------------------------
def two_sided_p(w: int, m: int) -> Fraction:
    """Exact two-sided binomial p-value of w of m under p = 1/2: the probability of every outcome no
    more likely than w (scipy.stats.binomtest's definition)."""
    observed = math.comb(m, w)
    return Fraction(sum(math.comb(m, k) for k in range(m + 1) if math.comb(m, k) <= observed), 2**m)


def brute_power(n: int, d: Fraction, e: Fraction, k: int, alpha: Fraction) -> tuple[Fraction, Fraction]:
    """(directional, two-sided) power by enumeration over M ~ Bin(n, d) and W ~ Bin(M, p)."""
    p = (1 + e / d) / 2
    toward = either = Fraction(0)
    for m in range(n + 1):
        pm = math.comb(n, m) * d**m * (1 - d) ** (n - m)
        for w in range(m + 1):
            if two_sided_p(w, m) <= alpha / k:
                pw = pm * math.comb(m, w) * p**w * (1 - p) ** (m - w)
                either += pw
                toward += pw if w > m - w else 0
    return toward, either


@pytest.mark.parametrize(("w", "m"), [(0, 1), (3, 10), (9, 10), (5, 10), (2, 7), (12, 30), (20, 25)])
def test_the_reference_p_value_is_scipys_binomtest(w, m):
    assert float(two_sided_p(w, m)) == pytest.approx(binomtest(w, m, 0.5).pvalue, rel=1e-12)


def test_two_items_by_hand():
    # D = 1, E = 1: both items discordant, both to A; W = 2 of 2 has p = P(W in {0, 2}) = 1/2 <= alpha 0.5
    assert power(2, 1.0, 1.0, 1, alpha=0.5).power == pytest.approx(1.0)
    # E = 0.5: p = 3/4; W = 2 (9/16) rejects toward A, W = 0 (1/16) rejects the wrong way, W = 1 has p = 1
    r = power(2, 1.0, 0.5, 1, alpha=0.5)
    assert (r.power, r.power_two_sided) == (pytest.approx(9 / 16), pytest.approx(10 / 16))
    # D = 1/2, E = 1/2: p = 1; only M = 2 (probability 1/4) can reject, and then W = 2 does
    assert power(2, 0.5, 0.5, 1, alpha=0.5).power == pytest.approx(0.25)
    # K = 2 halves the bar to 0.25: 2 of 2 (p = 0.5) no longer rejects
    assert power(2, 1.0, 1.0, 2, alpha=0.5).power == 0.0


@pytest.mark.parametrize(
    ("n", "d", "e", "k", "alpha"),
    [
        (10, "1/2", "3/10", 1, "1/20"),
        (20, "3/10", "1/5", 4, "1/20"),
        (30, "4/5", "1/2", 12, "1/10"),
        (15, "1", "3/5", 2, "1/20"),
        (25, "2/5", "2/5", 3, "1/20"),
        (28, "1/4", "1/10", 1, "1/5"),
    ],
)
def test_power_equals_an_exact_enumeration_of_every_outcome(n, d, e, k, alpha):
    d, e, alpha = Fraction(d), Fraction(e), Fraction(alpha)
    toward, either = brute_power(n, d, e, k, alpha)
    r = power(n, float(d), float(e), k, float(alpha))
    assert r.power == pytest.approx(float(toward), abs=1e-12)
    assert r.power_two_sided == pytest.approx(float(either), abs=1e-12)
    assert toward > 0  # the cases are chosen so that something rejects


@pytest.mark.parametrize(
    ("d", "e", "k"), [(0.2, 0.1, 48), (0.3, 0.1, 48), (0.4, 0.1, 48), (1.0, 0.5, 1), (0.6, 0.3, 12), (0.05, 0.05, 1)]
)
def test_items_needed_is_the_first_item_count_that_reaches_the_target(d, e, k):
    r = items_needed(d, e, k)
    assert r.n_items is not None and r.reason == ""
    assert power(r.n_items, d, e, k).power >= 0.8 > power(r.n_items - 1, d, e, k).power
    assert r.achieved == pytest.approx(power(r.n_items, d, e, k).power)


def test_the_headline_numbers():
    assert [items_needed(d, 0.10, 48).n_items for d in (0.2, 0.3, 0.4)] == [341, 517, 689]
    assert power(24, 0.3, 0.1, 48).power == pytest.approx(0.000716, abs=1e-6)
    assert power(300, 0.3, 0.1, 48).power == pytest.approx(0.4226, abs=1e-4)


def test_power_is_a_saw_tooth_in_n_and_items_needed_takes_the_first_crossing():
    # D = 1 (M = n): the attainable p-values jump with n; 30 items reach 80 %, 31 and 32 fall back
    curve = {n: power(n, 1.0, 0.5, 1).power for n in (29, 30, 31, 32, 33)}
    assert curve[30] >= 0.8 > curve[31] > curve[32] and curve[33] >= 0.8 > curve[29]
    assert items_needed(1.0, 0.5, 1).n_items == 30


def test_items_needed_by_hand_when_every_item_goes_to_a():
    # D = E = 1: W = n of n, p = 2 / 2^n; <= 0.05 first at n = 6, <= 0.05/48 first at n = 11 (2^11 = 2048 >= 1920)
    assert items_needed(1.0, 1.0, 1).n_items == 6
    assert items_needed(1.0, 1.0, 48).n_items == 11


def test_items_needed_says_why_when_the_cap_is_not_reached():
    r = items_needed(0.3, 0.01, 48, max_items=2000)
    assert r.n_items is None and r.achieved is None and "2,000" in r.reason


def test_the_monte_carlo_power_agrees_within_three_standard_errors():
    n, d, e, k, alpha, draws = 120, 0.35, 0.15, 8, 0.05, 40_000
    rng = np.random.default_rng(20240601)
    m = rng.binomial(n, d, draws)
    w = rng.binomial(m, (1 + e / d) / 2)
    pairs, back = np.unique(np.stack([w, m], axis=1), axis=0, return_inverse=True)  # binomtest once per outcome
    p_values = np.array([binomtest(int(a), int(b), 0.5).pvalue if b else 1.0 for a, b in pairs])[back.ravel()]
    hits = (p_values <= alpha / k) & (w > m - w)
    se = math.sqrt(hits.mean() * (1 - hits.mean()) / draws)
    assert abs(power(n, d, e, k, alpha).power - hits.mean()) < 3 * se


def test_detectable_difference_by_hand_and_its_bracket():
    # n = 6, D = 1, K = 1: only W = 6 of 6 rejects toward A (p = 1/32; 5 of 6 gives 7/32), so the power is
    # p^6 and 80 % needs p = 0.8^(1/6), E = 2p - 1
    r = detectable_difference(6, 1.0, 1)
    assert r.effect == pytest.approx(2 * 0.8 ** (1 / 6) - 1, abs=2e-6)
    assert power(6, 1.0, r.effect, 1).power >= 0.8 > power(6, 1.0, r.effect - 1e-5, 1).power
    dd = detectable_difference(300, 0.3, 48)
    assert power(300, 0.3, dd.effect, 48).power >= 0.8 > power(300, 0.3, dd.effect - 1e-5, 48).power
    none = detectable_difference(24, 0.3, 48)
    assert none.effect is None and "0.3" in none.reason


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: power(10, 1.5, 0.1, 4), "discordance"),
        (lambda: power(10, 0.0, 0.1, 4), "discordance"),
        (lambda: power(10, 0.3, 0.0, 4), "effect"),
        (lambda: power(10, 0.3, 0.4, 4), "exceeds discordance"),
        (lambda: power(10, 0.3, 0.1, 0), "configs"),
        (lambda: power(10, 0.3, 0.1, 4, alpha=1.0), "alpha"),
        (lambda: power(0, 0.3, 0.1, 4), "items"),
        (lambda: items_needed(0.3, 0.1, 4, power=1.0), "power"),
        (lambda: detectable_difference(10, 0.3, 4, power=0.0), "power"),
        (lambda: power(10, float("nan"), 0.1, 4), "discordance"),
        (lambda: power(2.5, 0.3, 0.1, 4), "items"),
    ],
)
def test_bad_inputs_are_one_line_user_errors(call, says):
    with pytest.raises(UserError, match=says) as e:
        call()
    assert "\n" not in str(e.value)


# -- the command line -----------------------------------------------------------------------------
def _plan(capsys, *argv):
    code = main(["plan", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_json_from_numbers(capsys):
    code, out, _ = _plan(capsys, "--discordance", 1, "--effect", 1, "--configs", 48, "--items", 6, "--json")
    r = json.loads(out)
    assert code == 0
    assert (r["items_needed"], r["discordance"], r["effect"], r["configs"], r["alpha"], r["power"]) == (
        11,
        1.0,
        1.0,
        48,
        0.05,
        0.8,
    )
    # at 6 items 6 of 6 gives p = 1/32 > 0.05/48: nothing rejects, whatever the difference
    assert (r["items"], r["power_at_items"], r["detectable_difference_at_items"]) == (6, 0.0, None)
    assert "Holm" in r["test"] and "(1 + E/D)/2" in r["model"]


def test_plan_sentence_from_numbers(capsys):
    code, out, _ = _plan(capsys, "--discordance", 0.3, "--effect", 0.1, "--configs", 48, "--items", 300)
    assert code == 0
    first, second = out.strip().splitlines()
    assert first.startswith(
        "To find a 10-point paired difference at 80 % power with discordance 0.30 under Holm "
        "over 48 configurations (alpha 0.05, exact paired sign test): 517 items per configuration"
    )
    assert second.startswith("At 300 items per configuration: power 0.423") and "0.131" in second


CONFIGS = ("truthfulqa/T1/greedy/0shot/logprob", "truthfulqa/T2/moderate/0shot/free_form")


@pytest.fixture
def pilot(tmp_path):
    """Two models, two configurations of 4 items. Greedy: a 1 0 1 1, b 1 1 0 1 (2 of 4 differ: mean
    |a - b| 1/2). Moderate, two seeds: a 1 1 1 1; b 1 1 1 and item 4 (1, 0), mean 0.5 (mean |a - b|
    0.5/4). Discordance (1/2 + 1/8)/2 = 0.3125."""
    rows = [
        (m, CONFIGS[0], f"i{i}", 0, s)
        for m, scores in (("a", (1, 0, 1, 1)), ("b", (1, 1, 0, 1)))
        for i, s in enumerate(scores)
    ]
    for seed in (0, 1):
        rows += [("a", CONFIGS[1], f"i{i}", seed, 1) for i in range(4)]
        rows += [("b", CONFIGS[1], f"i{i}", seed, 1 if i < 3 else 1 - seed) for i in range(4)]
    pd.DataFrame(rows, columns=["model", "config_id", "item_id", "seed", "item_score"]).to_csv(
        tmp_path / "items.csv", index=False
    )
    grid = pd.DataFrame(
        [(m, "truthfulqa", c, 4, "ok") for m in "ab" for c in CONFIGS],
        columns=["model", "benchmark", "config_id", "n_items", "status"],
    )
    grid.to_csv(tmp_path / "grid.csv", index=False)
    return tmp_path


def _write_cells(folder, elapsed):
    for (model, config), seconds in elapsed.items():
        record = {
            "key": f"{model}|{config}",
            "status": "ok",
            "elapsed_s": seconds,
            "row": {"model": model, "config_id": config, "n_items": 4},
        }
        stem = config.replace("/", "__")
        (folder / "cells" / model).mkdir(parents=True, exist_ok=True)
        if model == "a":  # the study's cells are gzipped, a fresh sweep's are not: read both
            with gzip.open(folder / "cells" / model / f"{stem}.json.gz", "wt") as f:
                json.dump(record, f)
        else:
            (folder / "cells" / model / f"{stem}.json").write_text(json.dumps(record))


def test_pilot_discordance_by_hand(pilot):
    r = pilot_discordance(pd.read_csv(pilot / "items.csv", dtype={"model": str, "item_id": str}))
    assert r.to_dict("records") == [
        {"benchmark": "truthfulqa", "model_a": "a", "model_b": "b", "n_configs": 2, "n_items": 4, "discordance": 0.3125}
    ]


def test_plan_grid_reads_the_pilot_and_its_cell_times(pilot, capsys):
    # seconds per item: 4/4 + 8/4 + 4/4 + 8/4 = 6, over the benchmark's two models and configurations
    _write_cells(pilot, {("a", CONFIGS[0]): 4, ("a", CONFIGS[1]): 8, ("b", CONFIGS[0]): 4, ("b", CONFIGS[1]): 8})
    code, out, _ = _plan(capsys, pilot / "grid.csv", "--json")
    [r] = json.loads(out)
    need = items_needed(0.3125, 0.1, 2).n_items
    assert code == 0
    assert (r["benchmark"], r["model_a"], r["model_b"], r["configs"], r["pilot_items"]) == (
        "truthfulqa",
        "a",
        "b",
        2,
        4,
    )
    assert r["discordance"] == 0.3125 and r["detectable_difference"] is None  # 4 items cannot reject at 0.025
    assert r["items_needed"] == need and r["seconds_per_item"] == pytest.approx(6.0)
    assert r["wall_s"] == pytest.approx(6.0 * need)
    code, out, _ = _plan(capsys, pilot / "grid.csv", "--items", pilot / "items.csv", "--effect", 0.2)
    assert code == 0 and "0.312" in out and f"{items_needed(0.3125, 0.2, 2).n_items:,}" in out


def test_plan_grid_without_cell_files_says_the_time_is_unknown(pilot, capsys):
    code, out, _ = _plan(capsys, pilot / "grid.csv", "--json")
    [r] = json.loads(out)
    assert code == 0 and r["wall_s"] is None and "wall time unknown" in r["note"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--discordance", 1.5, "--configs", 48], "discordance 1.5"),
        (["--discordance", 0.3, "--effect", 0.4, "--configs", 48], "exceeds discordance"),
        (["--discordance", 0.3, "--configs", 0], "configs 0"),
        (["--discordance", 0.3, "--configs", 48, "--alpha", 1], "alpha"),
        (["--discordance", 0.3, "--configs", 48, "--power", 0], "power"),
        (["--discordance", 0.3, "--configs", 48, "--items", "abc"], "item count"),
        (["--discordance", 0.3, "--configs", 48, "--items", 0], "--items 0"),
        (["--discordance", "x", "--configs", 48], "invalid float"),
        ([], "--discordance and --configs"),
        (["GRID", "--discordance", 0.3], "exclude each other"),
        (["missing/grid.csv"], "does not exist"),
    ],
)
def test_bad_plan_inputs_exit_2_with_one_line(pilot, capsys, argv, says):
    argv = [str(pilot / "grid.csv") if a == "GRID" else a for a in argv]
    try:
        code, _, err = _plan(capsys, *argv)
    except SystemExit as e:  # argparse's own refusals
        code, err = e.code, capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
