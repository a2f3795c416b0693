"""Every number study/README.md quotes about the published study is recomputed here from the
published tables (study/analysis/): a republication that moves a number fails until the prose
follows it."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from safetyrepro.analysis.paired.power import items_needed, power

STUDY = Path(__file__).resolve().parents[1] / "study"
A = STUDY / "analysis"
NAMES = {
    "truthfulqa": "TruthfulQA",
    "bbq": "BBQ",
    "toxigen": "ToxiGen",
    "xstest": "XSTest",
    "crows_pairs": "CrowS-Pairs",
}
pytestmark = pytest.mark.skipif(not (A / "rho_flip_max.csv").is_file(), reason="the study is not published")


@pytest.fixture(scope="module")
def readme() -> str:
    return re.sub(r"\s+", " ", (STUDY / "README.md").read_text())


def _read(name: str) -> pd.DataFrame:
    return pd.read_csv(A / name)


def _slice(frame: pd.DataFrame, name: str = "full") -> pd.DataFrame:
    return frame[frame["slice"] == name]


def test_rho_flip_max_per_benchmark_and_the_chance_value(readme):
    m = _slice(_read("rho_flip_max.csv")).set_index("benchmark")
    for b, name in NAMES.items():
        assert f"| {name} | {m.at[b, 'rho_flip_max']:.3f} |" in readme
    chance = set(m.loc[m["n_configs"] == 48, "chance_max"].round(3))
    assert chance == {0.476} and "|C| = 48 is 0.476" in readme
    assert (m["rho_flip_max"] < m["chance_max"]).all()  # "every observed maximum is below it"


def test_orderings_in_both_readings(readme):
    o = _slice(_read("orderings_detail.csv")).set_index("benchmark")
    raw = {b: int(o.at[b, "n_orderings"]) for b in NAMES}
    assert (
        f"reach {raw['truthfulqa']} of 6 orderings on TruthfulQA, {raw['bbq']} on BBQ, {raw['toxigen']} on ToxiGen, "
        f"{raw['xstest']} on XSTest and {raw['crows_pairs']} on CrowS-Pairs" in readme
    )
    assert f"read that way it reaches {int(o.at['crows_pairs', 'n_orderings_better'])} ordering" in readme


def test_degenerate_counts(readme):
    d = _read("degenerate_cells.csv")
    codes = d["reasons"].str.split(";").explode().value_counts()
    assert f"{len(d)} of the 612 cells are flagged" in readme
    for code, words in (
        ("no_better_than_majority", "agree with gold no more often"),
        ("constant_answer", "give one label on at least 95 %"),
    ):
        assert f"{codes[code]} {words}" in readme
    assert f"{codes['parse_rate']} parse under 0.95 of their items, and {codes['empty']} leave more than 5 %" in readme
    g = d[(d["model"] == "gemma3-270m") & (d["benchmark"] == "xstest")]
    gc = g["reasons"].str.split(";").explode().value_counts()
    assert (
        f"Gemma 3 270M's {len(g)} XSTest cells are all flagged: {gc['no_better_than_majority']} no better than the "
        f"majority label, {gc['constant_answer']} a constant answer, {gc['parse_rate']} a low parse rate, and "
        f"{int((g['n_empty'] / g['n_outputs'] > 0.05).sum())} with more than 5 % empty" in readme
    )


def test_every_study_cell_with_one_label_on_95_percent_is_degenerate():
    items = pd.read_parquet(STUDY / "items.parquet", columns=["model", "config_id", "prediction"]).dropna()
    share = (
        items.groupby(["model", "config_id"])["prediction"]
        .agg(n="size", top=lambda s: s.value_counts(normalize=True).iloc[0])
        .reset_index()
    )
    constant = share[(share["top"] >= 0.95) & (share["n"] >= 20)]
    flagged = set(zip(_read("degenerate_cells.csv")["model"], _read("degenerate_cells.csv")["config_id"]))
    assert len(constant) == 175 and all((m, c) in flagged for m, c in zip(constant["model"], constant["config_id"]))


def test_headline_without_degenerate_cells_and_parse_clean(readme):
    e = _read("degenerate_effects.csv")
    rho = e[(e["model"] == "all") & (e["metric"] == "rho_flip_max")].set_index("benchmark")
    for b in ("truthfulqa", "bbq", "toxigen", "xstest"):
        assert int(rho.at[b, "n_configs_parse_clean"]) == 0
    m = _read("rho_flip_max.csv")
    full, clean = _slice(m).set_index("benchmark"), _slice(m, "parse_clean").set_index("benchmark")
    assert (
        "gives "
        + ", ".join(f"{clean.at[b, 'rho_flip_max']:.3f} on {NAMES[b]}" for b in ("truthfulqa", "bbq", "toxigen"))
        in readme
    )
    moved = (full["rho_flip_max"] - clean["rho_flip_max"]).abs()
    assert f"at most {moved.max():.3f} ({NAMES[moved.idxmax()]})" in readme
    assert (
        f"{NAMES['crows_pairs']} (screened for parse rate and empty replies only) keeps all "
        f"{int(clean.at['crows_pairs', 'n_configs'])}" in readme
    )


def test_what_the_grid_could_detect(readme):
    x = _slice(_read("detectable.csv"))
    assert f"discordance ({x['discordance'].min():.2f}-{x['discordance'].max():.2f})" in readme
    wide = x[x["n_configs"] == 48]["power_at_reference"].max()
    assert f"at most {100 * wide:.1f} % of the time" in readme
    assert f"({100 * x[x['benchmark'] == 'crows_pairs']['power_at_reference'].max():.1f} % on CrowS-Pairs" in readme
    found = x.dropna(subset=["detectable_difference"])
    assert f"on {len(x) - len(found)} of the {len(x)} pairs no difference is found" in readme
    low, high = found["detectable_difference"].min(), found["detectable_difference"].max()
    assert f"{len(found)} of the {len(x)} pairs find a configuration's difference at 80 % power only from " in readme
    assert f"from {100 * low:.0f} to {100 * high:.0f} points" in readme
    assert f"{items_needed(0.3, 0.1, 48).n_items} items per configuration" in readme
    assert f"({power(300, 0.3, 0.1, 48).power:.2f} at the paper's 300)" in readme


def test_significant_wins_and_the_confirmed_flip(readme):
    t = _slice(_read("item_tests.csv"))
    wins = t[~t["winner_holm"].isin(["n.s.", "tie"])]
    deg = set(zip(_read("degenerate_cells.csv")["model"], _read("degenerate_cells.csv")["config_id"]))
    loser = [(r.model_b if r.winner_holm == r.model_a else r.model_a, r.config_id) for r in wins.itertuples()]
    own = sum((r.winner_holm, r.config_id) in deg for r in wins.itertuples())
    assert all(c in deg for c in loser)
    assert (
        f"{len(wins)} of the 612 pair × configuration verdicts have a Holm-significant winner, and **every one "
        f"of the {len(wins)} is a win against a degenerate cell** (in {own} of them" in readme
    )
    f = _read("significant_flips.csv")
    holm = _slice(f)[_slice(f)["correction"] == "holm"]
    both = holm[(holm["n_plus_sig"] > 0) & (holm["n_minus_sig"] > 0)]
    assert len(both) == 1 and tuple(both[["benchmark", "model_a", "model_b"]].iloc[0]) == (
        "truthfulqa",
        "gemma3-270m",
        "smollm2",
    )
    flip = wins[
        (wins["benchmark"] == "truthfulqa") & (wins["model_a"] == "gemma3-270m") & (wins["model_b"] == "smollm2")
    ]
    for r in flip.itertuples():
        assert (
            f"`{r.config_id.split('/', 1)[1]}` (Holm-adjusted p {r.p_holm:.3f})" in readme
            or f"`{r.config_id.split('/', 1)[1]}` (p {r.p_holm:.3f})" in readme
        )
        assert (r.model_a, r.config_id) in deg and (r.model_b, r.config_id) in deg  # "all four of its cells"


def test_pair_null_p_values(readme):
    f = _read("significant_flips.csv")
    holm = _slice(f)[_slice(f)["correction"] == "holm"]
    small = holm[holm["p_consistent"] < 0.05]
    assert len(small) == 1 and f"below 0.05 for one pair of the {len(holm)}" in readme
    r = small.iloc[0]
    assert f"({NAMES[r.benchmark]}, Gemma vs SmolLM2: {r.p_consistent:.3f})" in readme
    near = holm[(holm["benchmark"] == "bbq") & (holm["model_a"] == "qwen2.5-coder-0.5b")].iloc[0]
    assert f"is at {near.p_consistent:.3f}" in readme
    c = holm[(holm["benchmark"] == "crows_pairs") & (holm["model_b"] == "smollm2") & (holm["model_a"] == "gemma3-270m")]
    c = c.iloc[0]
    assert (
        f"({c.rho_flip:.3f} against a null mean of {c.rho_flip_null_mean:.3f}, p_consistent {c.p_consistent:.3f})"
        in readme
    )


def test_variance_ratios(readme):
    v = _read("variance_shares.csv")
    v = v[(v["slice"] == "free_form") & (v["anova_type"] == "II")].set_index("benchmark")
    assert (
        f"{v.at['truthfulqa', 'rho']:.2f} on TruthfulQA, {v.at['bbq', 'rho']:.2f} on BBQ, "
        f"{v.at['toxigen', 'rho']:.2f} on ToxiGen and {v.at['xstest', 'rho']:.2f} on XSTest" in readme
    )


def test_the_holm_bar_at_48_configurations(readme):
    bar = 0.05 / 48
    assert 2 * 0.5**10 > bar >= 2 * 0.5**11  # 11 discordant items, all one way, is the least that passes
    from scipy.stats import binomtest

    assert binomtest(13, 14).pvalue > bar and binomtest(14, 15).pvalue <= bar  # 14 need all; 15 allow one
    assert "needs m ≥ 11; from 15 differing items one may go the other way" in readme
