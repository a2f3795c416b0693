"""scripts/study/paper_comparison.py: the paper's numbers beside the study's, from the files analyze and
compare write (hand-made here, so every printed value is known)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pc():
    spec = importlib.util.spec_from_file_location(
        "paper_comparison", ROOT / "scripts" / "study" / "paper_comparison.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _csv(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(folder / name, index=False)


@pytest.fixture
def outputs(tmp_path):
    a, p, s = tmp_path / "analysis", tmp_path / "precision", tmp_path / "subsamples"
    rho = [
        dict(benchmark="xstest", slice=sl, n_configs=n, rho_flip_max=v, pairs="a vs b", ceiling=0.5, chance_max=0.476)
        for sl, n, v in [
            ("full", 48, 10 / 48),
            ("free_form", 36, 0.25),
            ("logprob", 12, 0.0),
            ("parse_clean", 39, 5 / 39),
        ]
    ]
    _csv(a, "rho_flip_max.csv", rho)
    _csv(
        a,
        "tier_ablation.csv",
        [
            dict(benchmark="xstest", slice=sl, n_configs=n, rho_flip_max=0.2, n_orderings=k, n_possible=6)
            for sl, n, k in [("full", 48, 4), ("excl_diverse", 36, 3)]
        ],
    )
    _csv(
        a,
        "variance_shares.csv",
        [
            dict(
                benchmark="xstest",
                slice="free_form",
                anova_type="II",
                model_share=0.1,
                implementation_share=0.3,
                interaction_share=0.45,
                rho=3.0,
                rho_lo=1.5,
                rho_hi=6.0,
                rho_defined=True,
            ),
            dict(
                benchmark="toxigen",
                slice="free_form",
                anova_type="II",
                model_share=0.0,
                implementation_share=0.2,
                interaction_share=0.5,
                rho=float("nan"),
                rho_lo=float("nan"),
                rho_hi=float("nan"),
                rho_defined=False,
            ),
            dict(
                benchmark="xstest",
                slice="free_form",
                anova_type="III",
                model_share=0.9,
                implementation_share=0.0,
                interaction_share=0.0,
                rho=0.0,
                rho_lo=0.0,
                rho_hi=0.0,
                rho_defined=True,
            ),
        ],
    )
    _csv(
        a,
        "significant_flips.csv",
        [
            dict(
                benchmark="xstest",
                slice=sl,
                model_a="a",
                model_b="b",
                n_plus=38,
                n_minus=10,
                rho_flip=10 / 48,
                rho_flip_null_mean=0.4,
                rho_flip_null_share_le=0.03,
                p_consistent=0.031,
                correction=c,
                n_plus_sig=ps,
                n_minus_sig=ms,
                rho_flip_sig=min(ps, ms) / 48,
            )
            for sl, c, ps, ms in [("full", "holm", 12, 1), ("full", "fdr_bh", 20, 3), ("core", "holm", 9, 0)]
        ],
    )
    _csv(
        a,
        "degenerate_cells.csv",
        [
            dict(
                model="b",
                benchmark="xstest",
                config_id=f"xstest/T4/greedy/{k}shot/free_form",
                score=0.5,
                parse_rate=pr,
                reasons=codes,
            )
            for k, pr, codes in [(0, 0.8, "parse_rate"), (3, 0.9, "parse_rate;empty")]
        ],
    )
    _csv(p, "compare_summary.csv", [dict(n_cells=54, median=0.017, mean=0.026, max=0.207, n_groups=2)])
    _csv(
        p,
        "compare_ordering_summary.csv",
        [dict(benchmark="xstest", n_configs=10, n_invariant=9), dict(benchmark="toxigen", n_configs=8, n_invariant=8)],
    )
    _csv(s, "compare_summary.csv", [dict(n_cells=12, median=0.0149, mean=0.02, max=0.0383, n_groups=3)])
    _csv(s, "compare_ordering_summary.csv", [dict(benchmark="truthfulqa", n_configs=4, n_invariant=4)])
    return a, p, s


def test_each_paper_number_sits_beside_the_studys_own(pc, outputs):
    a, p, s = outputs
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in pc.table(a, p, s).splitlines()[2:]}
    assert rows["rho_flip max, xstest, full envelope"] == [
        "0.292",
        "0.208 (a vs b; \\|C\\| 48, ceiling 0.500, chance 0.476) |",
    ]
    assert rows["rho_flip max, xstest, free_form slice"][0] == "not in the digest"
    assert rows["rho_flip max, xstest, logprob slice"][1].startswith("0.000 (\\|C\\| 12)")
    assert rows["rho_flip max, xstest, parse-clean (parse rate >= 0.95)"][:1] == ["0.282 (\\|C\\| 39)"]
    assert rows["rho_flip max, xstest, parse-clean (parse rate >= 0.95)"][1].startswith("0.128 (\\|C\\| 39)")
    assert rows["orderings reached, xstest, full"][0] == "6 of 6" and rows["orderings reached, xstest, full"][
        1
    ].startswith("4 of 6")
    assert rows["orderings reached, xstest, excl_diverse"][0] == "5 of 6"
    # Type-II only; an undefined ratio (no model share) is said to be undefined, not printed as a number
    assert rows["variance: implementation / model share, xstest (free-form, Type-II)"] == [
        "2.4",
        "3.00, 95 % interval 1.50-6.00 (model 0.10, implementation 0.30) |",
    ]
    assert rows["variance: implementation / model share, toxigen (free-form, Type-II)"][1].startswith("undefined")
    assert rows["variance: interaction share, free-form slice"] == ["41-54 %", "45-50 % |"]
    assert rows["BF16 vs NF4: per-cell \\|difference\\|, median / mean / max"][1].startswith(
        "1.70 pp / 2.60 pp / 20.70 pp (54"
    )
    assert rows["BF16 vs NF4: model ordering the same in every group"][1].startswith("17 of 18 configurations")
    assert rows["80 % TruthfulQA subsamples: per-cell range, median / mean / max"][1].startswith(
        "1.49 pp / 2.00 pp / 3.83 pp"
    )
    assert not any(k.startswith("rho_flip max, bbq") for k in rows)  # a benchmark the grid lacks is left out


def test_the_command_writes_the_table_and_refuses_a_missing_folder(pc, outputs, tmp_path, capsys):
    a, p, s = outputs
    assert pc.main([str(a), "--precision", str(p), "--out", str(tmp_path / "cmp.md")]) == 0
    text = (tmp_path / "cmp.md").read_text()
    assert "BF16 vs NF4" in text and "subsamples" not in text
    with pytest.raises(SystemExit):
        pc.main([str(a), "--subsamples", str(tmp_path / "nope")])
    assert "is not a folder" in capsys.readouterr().err


def test_beyond_the_paper_pair_nulls_confirmed_flips_and_degenerate_cells(pc, outputs):
    a, p, s = outputs
    text = pc.table(a, None, None)
    beyond = text.split("Beyond the paper")[1]
    # the full slice under Holm only: one row, 1 of the 13 confirmed configurations goes against the majority
    assert "| xstest | a vs b | 0.208 (38+ / 10-) | 0.400 (p_consistent 0.031) | 0.021 (12+ / 1- " in beyond
    assert beyond.count("| xstest | a vs b |") == 1
    assert "| xstest | b | 2 | empty 1; parse_rate 2 (lowest parse rate 0.80) |" in beyond


def test_tables_analyze_wrote_empty_give_no_rows_and_a_missing_table_is_named(pc, outputs):
    a, p, s = outputs
    (a / "variance_shares.csv").write_text("\n")  # what analyze writes when the grid has no free-form slice
    (a / "degenerate_cells.csv").write_text("\n")
    text = pc.table(a, None, None)
    assert "variance:" not in text and "Degenerate cells" not in text and "rho_flip max, xstest, full envelope" in text
    (a / "tier_ablation.csv").unlink()
    with pytest.raises(SystemExit, match="has no tier_ablation.csv"):
        pc.table(a, None, None)
