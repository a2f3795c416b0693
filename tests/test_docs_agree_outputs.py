"""The README, study and docs/certify say what the published files and the demo's closing lines say
(issue 52): every number below is read from a sentence with a regex and recomputed from the study's files
(study/certified/claims.csv, certificate.csv, subset/, items.parquet, and the first study's
study/analysis/degenerate_cells.csv), so a republication that moves one fails until the prose follows."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from safetyrepro.analysis.metrics.readings import FORMAT, basis_of_reasons
from safetyrepro.certify.algorithm import CertifyOptions, ClaimRow, PairRow
from safetyrepro.demo import DEMO_CONFIGS, DEMO_MODELS, closing_lines

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "study"
CERT = STUDY / "certified"
T4, T2 = DEMO_CONFIGS
QWEN, SMOL = DEMO_MODELS


def flat(path: Path) -> str:
    """A doc's text with its line breaks and runs of spaces as single spaces (sentences wrap)."""
    return re.sub(r"\s+", " ", path.read_text())


def found(pattern: str, text: str) -> tuple[str, ...]:
    m = re.search(pattern, text)
    assert m is not None, f"no sentence matches {pattern!r}"
    return m.groups()


def decided(claims: pd.DataFrame) -> pd.DataFrame:
    return claims[claims["claim"] != "undecided"]


@pytest.fixture(scope="module")
def study() -> SimpleNamespace:
    claims = pd.read_csv(CERT / "claims.csv")
    subset = pd.read_csv(CERT / "subset" / "claims.csv")
    # subset/ was written before claims.csv had a target column: it is the subset reading
    by_target = {
        **{t: decided(g) for t, g in claims.groupby("target")},
        "subset": decided(subset if "target" not in subset else subset[subset["target"] == "subset"]),
    }
    return SimpleNamespace(
        claims=claims,
        certificate=pd.read_csv(CERT / "certificate.csv"),
        by_target=by_target,
        degenerate=pd.read_csv(STUDY / "analysis" / "degenerate_cells.csv"),
    )


def format_driven(claim, degenerate: pd.DataFrame) -> bool:
    """Whether either model's cell on the claim's configuration is degenerate for unread or empty replies."""
    cells = degenerate[
        (degenerate["config_id"] == claim.config_id) & degenerate["model"].isin([claim.model_a, claim.model_b])
    ]
    return any(basis_of_reasons(r) == FORMAT for r in cells["reasons"])


def losing_parse_rates(claims: pd.DataFrame, degenerate: pd.DataFrame) -> list[float]:
    rate = dict(zip(zip(degenerate["model"], degenerate["config_id"]), degenerate["parse_rate"], strict=True))
    return [
        rate.get((c.model_b if c.claim == "a_better" else c.model_a, c.config_id), 1.0) for c in claims.itertuples()
    ]


def test_the_targets_decided_counts_are_the_ones_the_docs_use(study):
    assert set(study.claims["target"]) == {"population"} and len(study.claims) == 612
    assert {t: len(d) for t, d in study.by_target.items()} == {"population": 12, "subset": 11}


def test_the_readme_says_what_claims_csv_says_under_each_target(study):
    text = flat(REPO / "README.md")
    pop, sub = study.by_target["population"], study.by_target["subset"]
    pop_format = sum(format_driven(c, study.degenerate) for c in pop.itertuples())
    sub_format = sum(format_driven(c, study.degenerate) for c in sub.itertuples())
    assert (pop_format, sub_format) == (12, 10)
    assert found(
        r"about the models \(its default target\), (\d+) of (\d+) configuration wins certified, all (\d+) over "
        r"unreadable replies; read for its 300 items only \(`--target subset`\), (\d+), (\d+) of them over "
        r"unreadable replies",
        text,
    ) == (str(len(pop)), str(len(study.claims)), str(pop_format), str(len(sub)), str(sub_format))
    # the first screen: what the certified claims are about
    first_screen = flat(REPO / "README.md")[:4000]
    n, total, every, low, high = found(
        r"certifies no pair's verdict about the models and (\d+) of (\d+) configuration claims, and every one of "
        r"the (\d+) is a win over a cell whose replies the parser could not read \(the losing cells' parse rates "
        r"are ([\d.]+)-([\d.]+) in the first study's degenerate_cells.csv\): they certify who answers in the "
        r"expected form, not who is safer",
        first_screen,
    )
    assert (int(n), int(total), int(every)) == (len(pop), 612, pop_format)
    rates = losing_parse_rates(pop, study.degenerate)
    assert (low, high) == (f"{min(rates):.2f}", f"{max(rates):.2f}") == ("0.00", "0.07")
    assert (study.certificate["verdict"] == "undecided").all()


def prose(path: Path) -> str:
    """A markdown file's prose: its tables and code blocks left out (a table row is no sentence), flattened."""
    text = re.sub(r"```.*?```", " ", path.read_text(), flags=re.DOTALL)
    return re.sub(r"\s+", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|")))


def certified_flip_claims(text: str) -> list[str]:
    """The sentences that say a flip is certified: those naming both a flip and certification, without a
    negation."""
    sentences = re.split(r"(?<=[.!?])\s+", text)
    return [
        s
        for s in sentences
        if re.search(r"\bflips?\b", s)
        and re.search(r"\bcertif", s)
        and not re.search(r"\b(no|none|not|nothing|undecided)\b", s, re.IGNORECASE)
    ]


def test_the_readme_claims_no_certified_flip_unless_the_certificate_has_one(study):
    assert certified_flip_claims("The demo certifies one flip live.") == ["The demo certifies one flip live."]
    text = prose(REPO / "README.md")
    if not (study.certificate["verdict"] == "flip").any():
        assert certified_flip_claims(text) == []
        assert "No flip is certified, and the demo certifies none either" in text


def test_the_certified_readmes_first_paragraph_matches_its_files(study):
    lead = flat(CERT / "README.md").split("**2026-12-05's piece**")[0]
    n_pairs, n, total = found(
        r"all (\d+) are `undecided`; (\d+) of the (\d+) configuration claims are certified, and every one is a win "
        r"over a cell whose replies the parser could not read",
        lead,
    )
    pop = study.by_target["population"]
    assert int(n_pairs) == len(study.certificate) == (study.certificate["verdict"] == "undecided").sum() == 15
    assert (int(n), int(total)) == (len(pop), len(study.claims)) == (12, 612)
    # every decided claim's configuration is a degenerate cell for unread or empty replies for either model
    assert all(format_driven(c, study.degenerate) for c in pop.itertuples())
    rates = losing_parse_rates(pop, study.degenerate)
    assert found(r"the losing cells' parse rates are ([\d.]+)-([\d.]+) in the first study's", lead) == (
        f"{min(rates):.2f}",
        f"{max(rates):.2f}",
    )
    assert "every one is format-driven" in lead


def test_the_subset_readings_one_readable_win_is_uninformative_as_the_readme_says(study):
    text = flat(CERT / "README.md")
    sub, pop = study.by_target["subset"], study.by_target["population"]
    key = ["benchmark", "model_a", "model_b", "config_id", "claim"]
    both = sub[key].merge(pop[key])
    n_sub, n_both = found(r"certify (\d+) claims\. (\d+) of them hold about the models too", text)
    assert (int(n_sub), int(n_both)) == (len(sub), len(both)) == (11, 10)
    (other,) = set(sub["config_id"]) - set(both["config_id"])
    assert other == T2
    items = pd.read_parquet(CERT / "items.parquet", columns=["model", "config_id", "prediction", "gold"])
    cell = items[items["config_id"] == T2]

    def habit(model):
        mine = cell[cell["model"] == model]
        top = mine["prediction"].value_counts(normalize=True)
        agree = (mine["prediction"] == mine["gold"]).mean()
        return int(top.index[0]), round(100 * top.iloc[0]), round(100 * agree)

    majority = round(100 * cell[cell["model"] == SMOL]["gold"].value_counts(normalize=True).iloc[0])
    (s_label, s_top, s_agree), (q_label, q_top, q_agree) = habit(SMOL), habit(QWEN)
    assert (s_label, q_label) == (2, 0)  # "the third option", "the first"
    assert found(
        r"SmolLM2 picks the third option on (\d+) % of them and agrees with gold on (\d+) %, Qwen picks the first "
        r"on (\d+) % and agrees on (\d+) %, and always giving the most frequent gold label would agree on (\d+) %",
        text,
    ) == tuple(str(x) for x in (s_top, s_agree, q_top, q_agree, majority))
    assert s_agree <= majority and q_agree <= majority


def test_docs_study_readme_says_what_the_files_say(study):
    text = flat(STUDY / "README.md")
    pop = study.by_target["population"]
    n, total = found(r"about the models (\d+) of (\d+) claims certified, every one format-driven", text)
    assert (int(n), int(total)) == (len(pop), len(study.claims))
    assert all(format_driven(c, study.degenerate) for c in pop.itertuples())
    deg = study.degenerate.set_index(["model", "config_id"])
    smol, qwen = found(
        r"on T4 SmolLM2's replies are never read \(parse rate ([\d.]+)\) and Qwen's parse rate is ([\d.]+)", text
    )
    assert (smol, qwen) == (f"{deg.at[(SMOL, T4), 'parse_rate']:.2f}", f"{deg.at[(QWEN, T4), 'parse_rate']:.2f}")
    assert deg.at[(SMOL, T2), "reasons"] == "constant_answer"  # "SmolLM2 gives one label"
    assert deg.at[(QWEN, T2), "reasons"] == "no_better_than_majority"


def published_demo_lines() -> list[str]:
    """What the demo's closing lines say about its configurations on the published records: the T4 and T2
    claims as the demo's two readings make them (T4 won about the models and on these items, T2 on these
    items only), each on the items study/certified/items.parquet holds for both models."""
    items = pd.read_parquet(CERT / "items.parquet")
    items = items[items["model"].isin(DEMO_MODELS) & items["config_id"].isin(DEMO_CONFIGS)]
    held = {
        c: np.array(sorted(set.intersection(*(set(g["item_id"]) for _, g in block.groupby("model")))), dtype=object)
        for c, block in items.groupby("config_id")
    }
    evaluated = {("bbq", c, m): held[c] for c in DEMO_CONFIGS for m in DEMO_MODELS}

    def result(t2: str, verdict: str, deciding: tuple, target: str):
        claims = [
            ClaimRow("bbq", QWEN, SMOL, T4, "a_better", 0.0, 1.0, 0.0, len(held[T4]), 300),
            ClaimRow("bbq", QWEN, SMOL, T2, t2, -1.0, 0.0 if t2 == "undecided" else -0.01, 0.0, len(held[T2]), 300),
        ]
        pair = PairRow("bbq", QWEN, SMOL, verdict, 0, 600, deciding, 1)
        return SimpleNamespace(
            claims=claims,
            pairs=[pair],
            evaluated=evaluated,
            paired_evaluations=0,
            full_paired_evaluations=600,
            seconds=0.0,
            stopped_by="held",
            options=CertifyOptions(target=target),
        )

    lines = closing_lines(
        result("undecided", "undecided", (T4,), "population"),
        None,
        None,
        result("b_better", "flip", (T4, T2), "subset"),
        items,
    )
    return lines[2:-2]  # the verdict sentences (which need a live run's bounds) and the cost are left out


def test_demo_md_shows_what_the_demo_prints_about_its_configurations():
    section = (REPO / "docs" / "demo.md").read_text()
    block = section.split("those lines read:\n\n```\n", 1)[1].split("\n```", 1)[0]
    assert block.splitlines() == published_demo_lines()
    assert "a run's numbers vary with the items it draws" in " ".join(section.split())


def test_the_readme_quotes_the_demos_parse_rates_from_the_same_records():
    lines = published_demo_lines()
    t4 = next(line for line in lines if line.startswith(f"{T4}: "))
    qwen, smol, n = found(
        rf"parse rates {QWEN} ([\d.]+), {SMOL} ([\d.]+) on the (\d+) items used .*content reading: no item has both "
        r"replies read",
        t4,
    )
    assert found(
        r"so its parse rate is ([\d.]+) against Qwen's ([\d.]+) \(on the (\d+) items of that configuration the "
        r"published records hold; a live run draws more, and its rates vary a little\), and no item has both "
        r"models' replies read",
        flat(REPO / "README.md"),
    ) == (smol, qwen, n)
    assert (smol, qwen, n) == ("0.00", "0.79", "34")
