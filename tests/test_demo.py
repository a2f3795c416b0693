"""`safetyrepro demo`: its defaults and help, why it asks what it asks (the published study's reading of
the pair), and its closing lines (no model runs here; the demo end to end is measured by hand,
docs/measured.md)."""

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.cli import build_parser, main
from safetyrepro.demo import (
    DEMO,
    DEMO_BUDGET,
    DEMO_CONFIGS,
    DEMO_MODELS,
    DEMO_PRECISION,
    STUDY,
    STUDY_DIR,
    closing_lines,
    study_records,
)
from safetyrepro.sweep.options import SweepOptions
from safetyrepro.sweep.plan import select_configs
from safetyrepro.tasks.envelope import default_rules

REPO = Path(__file__).resolve().parents[1]


def test_demo_help_shows_the_demo_defaults_not_the_sweeps(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "demo default: qwen2.5-coder-0.5b smollm2)" in text
    assert f"demo default: {' '.join(DEMO_CONFIGS)}, unless --benchmarks or an axis filter is given" in text
    assert f"demo default: {DEMO_BUDGET}" in text and "demo default: fp32, the studies'" in text
    assert "bf16 (default)" not in text
    args = build_parser().parse_args(["demo"])
    assert (args.models, args.configs, args.precision, args.study) == (None, None, DEMO_PRECISION, STUDY_DIR)


def test_the_demo_certifies_its_two_configurations_unless_told_otherwise():
    def demo_selection(*argv):  # the demo's sweep options: its models and configurations unless the user names some
        o = SweepOptions.from_args(build_parser().parse_args(["demo", *argv]), DEMO)
        return SimpleNamespace(models=[m.label for m in o.models], configs=o.filters.get("config"), tier=o.tier)

    args = demo_selection()
    assert args.models == list(DEMO_MODELS) and args.configs == list(DEMO_CONFIGS)
    cfgs = select_configs(default_rules(), ["bbq"], args.tier, DEMO_PRECISION, {"config": args.configs})
    assert sorted(c.config_id for c in cfgs) == sorted(DEMO_CONFIGS)
    # naming a benchmark, an axis or configurations replaces the demo's slice; naming models keeps it
    assert demo_selection("--benchmarks", "xstest").configs is None
    assert demo_selection("--shots", "5").configs is None
    other = demo_selection("--models", "gemma3-270m", "smollm2")
    assert other.models == ["gemma3-270m", "smollm2"] and other.configs == list(DEMO_CONFIGS)


def test_the_demo_starts_from_the_published_records(tmp_path):
    assert study_records(STUDY_DIR) == [STUDY_DIR, STUDY_DIR / "certified"]
    assert study_records(tmp_path) == []  # a checkout without them: everything live


def test_the_question_is_the_one_the_published_studies_raised():
    """The demo's reason, from the published records: in the first study (24 items) Qwen led on T4 chain of
    thought by 29 points, every one of its wins on an item SmolLM2 got wrong; on T2 at three shots SmolLM2
    led by 29 points there, by 4.3 points on all 300 items in the certified study's records."""
    qwen, smol = DEMO_MODELS
    t4, t2 = DEMO_CONFIGS

    def diff(path, cid, n):
        items = pd.read_parquet(REPO / path)
        means = items[items["config_id"] == cid].groupby(["model", "item_id"])["item_score"].mean()
        d = means.loc[qwen] - means.loc[smol]
        assert len(d) == n
        return round(float(d.mean()), 4), round(float((d != 0).mean()), 4)

    assert diff("study/items.parquet", t4, 24) == (round(7 / 24, 4), round(7 / 24, 4))
    assert diff("study/items.parquet", t2, 24) == (round(-7 / 24, 4), round(15 / 24, 4))
    assert diff("study/certified/items.parquet", t2, 300)[0] == round(-13 / 300, 4)


def _flip_result():
    """A certified flip on two configurations of a 100-item subset, built as a live run would be."""
    ids = tuple(f"bbq/{i:03d}" for i in range(100))
    rng = np.random.default_rng(0)
    scores = {
        ("c1", "a"): rng.random(100) < 0.8,
        ("c1", "b"): rng.random(100) < 0.3,
        ("c2", "a"): rng.random(100) < 0.3,
        ("c2", "b"): rng.random(100) < 0.8,
    }

    def oracle(bench, cid, model, items):
        return np.array([float(scores[(cid, model)][ids.index(i)]) for i in items])

    problem = BenchmarkProblem("bbq", ("c1", "c2"), ("a", "b"), ids, 1)
    return certify([problem], oracle, CertifyOptions(order="subset", batch=10))


def test_the_closing_lines_say_the_verdict_its_cost_and_where_the_study_is():
    result = _flip_result()
    lines = closing_lines(result, 104.4)
    assert result.pairs[0].verdict == "flip" and result.options.target == "population"
    c1, c2 = (c for c in result.claims)
    assert lines[0].startswith(
        f"About the models: bbq: the verdict flips. a is ahead of b with c1 (by {c1.estimate:.3f} on "
        f"{c1.items_used} items, simultaneous bounds {c1.lower:.3f} to {c1.upper:.3f}), and b ahead of a with c2 "
        f"(by {-c2.estimate:.3f} on {c2.items_used} items"
    )
    assert 0 < c1.lower and c2.upper <= 0  # a bound at a rejected candidate: the difference is below it
    n, full = result.paired_evaluations, result.full_paired_evaluations
    assert full == 200 and n < full
    assert lines[1] == (
        f"It used {n:,} of the full grid's 200 paired evaluations ({100 * n / 200:.0f} %), in "
        f"{result.seconds:.0f} s of evaluation; scoring the whole grid would take about 104.4 h here. "
        "Every claim holds with probability at least 0.95, all together; the first lines are about the models: "
        "they generalise over the benchmark's items (as draws from the benchmark, so another draw of items would "
        "confirm them) and hold fixed these seeds, this one draw of few-shot examples and these templates, so they "
        "say nothing about other seeds, few-shot examples or templates."
    )
    assert closing_lines(result, None, 32)[1].startswith(
        f"It used {n:,} of the full grid's 200 paired evaluations ({100 * n / 200:.0f} %), 32 model evaluations run "
        "here (the rest from the studies' published records) in "
    )
    assert lines[2].endswith(f"{STUDY}.") and (REPO / STUDY).is_file()


def test_the_closing_lines_set_the_subset_reading_beside_the_population_one():
    """The finding a user needs: the subset reading flips where, beyond item noise, one side holds."""
    flip = _flip_result()
    one_sided = dataclasses.replace(
        flip,
        pairs=[dataclasses.replace(flip.pairs[0], verdict="undecided", deciding=("c1",))],
    )
    lines = closing_lines(one_sided, None, None, subset=flip)
    assert lines[1].startswith("About these items only (--target subset, the paper's reading): bbq: the verdict flips.")
    assert lines[2] == (
        "bbq: on these items the lead flips, as the paper's metric sees it; beyond item noise only c1 holds, so "
        "the flip is partly this sample's."
    )


def test_a_configuration_reads_as_words_and_an_exhausted_one_says_its_exact_margin():
    from safetyrepro.certify.algorithm import ClaimRow
    from safetyrepro.certify.outputs import _margin, config_words

    assert config_words("bbq/T4/greedy/0shot/free_form") == (
        "T4 (chain of thought ending in an Answer: line), greedy, 0-shot, free-form"
    )
    assert config_words("bbq/T2/greedy/3shot/logprob").endswith("3-shot, log-probabilities")
    exact = ClaimRow("bbq", "a", "b", "x", "b_better", -0.043, -0.043, -0.0433, 300, 300)
    assert _margin(exact, -1) == "by 0.043 on all 300 items"


def test_openmp_threads_sleep_when_idle_unless_the_user_chose(monkeypatch):
    from safetyrepro import demo

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert demo.quiet_openmp_waits() is False
    assert demo.os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(demo.sys, "modules", {k: v for k, v in demo.sys.modules.items() if k != "torch"})
    assert demo.quiet_openmp_waits() is True and demo.os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_the_demos_quoted_t2_numbers_hold_on_the_published_records():
    """docs/demo.md: SmolLM2's T2 3-shot lead is 4.3 points on all 300 items (80 discordant items
    against 93); the subset target certifies it (after 285 of them), the population target over BBQ's 48
    configurations does not: with every item in, its bounds (-0.23 to 0.14) still hold 0."""
    from safetyrepro.tasks.subsets import item_set

    qwen, smol = DEMO_MODELS
    t2 = DEMO_CONFIGS[1]
    items = pd.read_parquet(REPO / "study/certified/items.parquet")
    means = items[items["config_id"] == t2].groupby(["model", "item_id"])["item_score"].mean()
    d = means.loc[qwen] - means.loc[smol]
    assert len(d) == 300 and int((d > 0).sum()) == 80 and int((d < 0).sum()) == 93
    order = tuple(it.id for it in item_set("bbq").items)
    assert set(order) == set(d.index)
    family = tuple(c.config_id for c in default_rules().configs("bbq") if c.config_id != t2)
    problem = BenchmarkProblem("bbq", (t2,), (qwen, smol), order, 1, family)

    def oracle(bench, cid, model, ids):
        return means.loc[model].loc[list(ids)].to_numpy()

    population = certify([problem], oracle, CertifyOptions(order="subset"))
    subset = certify([problem], oracle, CertifyOptions(order="subset", target="subset"))
    (p,), (s,) = population.claims, subset.claims
    assert (p.claim, p.items_used, p.estimate) == ("undecided", 300, round(-13 / 300, 12))
    assert (s.claim, s.items_used, s.upper < 0) == ("b_better", 285, True)  # the growth-rate stakes: 15 items early
    assert p.lower == pytest.approx(-0.23) and p.upper == pytest.approx(0.14) and population.family_size == 48


T4, T2 = DEMO_CONFIGS
QWEN, SMOL = DEMO_MODELS


def _records(config_id: str, model: str, n: int, read, right, answer=None) -> list[dict]:
    """Item records in items.parquet's columns: gold cycles 0, 1, 2; a wrong read reply names the next label."""
    rows = []
    for k in range(n):
        gold = k % 3
        said = (answer if answer is not None else gold if right(k) else (gold + 1) % 3) if read(k) else None
        rows.append(
            {
                "model": model,
                "config_id": config_id,
                "item_id": f"bbq/{k:03d}",
                "seed": 0,
                "parsed": read(k),
                "prediction": said,
                "gold": gold,
                "item_score": float(said == gold),
            }
        )
    return rows


def _demo_items(smol_t2_answer=None, qwen_t2_right=4) -> pd.DataFrame:
    """The demo's shape in small: on T4 free-form SmolLM2's replies are never read and Qwen's on items 0-5 of
    the 8 used (items 8-9, drawn but not used, are unread too: counting them would say 0.60); on T2 log-probs
    both read everything, SmolLM2 right on 6 of 8 and Qwen on 4."""
    rows = _records(T4, QWEN, 10, lambda k: k < 6, lambda k: k < 4)
    rows += _records(T4, SMOL, 10, lambda k: False, lambda k: False)
    rows += _records(T2, QWEN, 8, lambda k: True, lambda k: k < qwen_t2_right)
    rows += _records(T2, SMOL, 8, lambda k: True, lambda k: k < 6, smol_t2_answer)
    return pd.DataFrame(rows)


def _demo_result(claims, verdict: str, deciding: tuple, target: str):
    """A certify result as the demo's run returns it (the fields closing_lines reads)."""
    from safetyrepro.certify.algorithm import PairRow

    order = np.array([f"bbq/{k:03d}" for k in range(10)], dtype=object)
    return SimpleNamespace(
        claims=claims,
        pairs=[PairRow("bbq", QWEN, SMOL, verdict, 16, 20, deciding, 2 - len(deciding))],
        evaluated={("bbq", c, m): order if c == T4 else order[:8] for c in DEMO_CONFIGS for m in DEMO_MODELS},
        paired_evaluations=16,
        full_paired_evaluations=20,
        seconds=30.0,
        stopped_by="answered",
        options=CertifyOptions(target=target),
    )


def _demo_readings(smol_t2_answer=None, qwen_t2_right=4) -> list[str]:
    from safetyrepro.certify.algorithm import ClaimRow

    t4 = ClaimRow("bbq", QWEN, SMOL, T4, "a_better", 0.1, 0.9, 0.5, 8, 10)
    population = _demo_result(
        [t4, ClaimRow("bbq", QWEN, SMOL, T2, "undecided", -0.6, 0.2, -0.25, 8, 8)], "undecided", (T4,), "population"
    )
    subset = _demo_result(
        [t4, ClaimRow("bbq", QWEN, SMOL, T2, "b_better", -0.25, -0.25, -0.25, 8, 8)], "flip", (T4, T2), "subset"
    )
    return closing_lines(population, None, 4, subset, _demo_items(smol_t2_answer, qwen_t2_right))


def test_the_demos_answer_carries_the_parse_rates_of_the_cells_it_rests_on():
    """Issue 52: SmolLM2 parses nothing on T4, so the demo's only win about the models is format-driven, and
    the sentence that names it says so with both parse rates on the items the claim used."""
    lines = _demo_readings()
    assert lines[0].startswith("About the models: bbq: qwen2.5-coder-0.5b vs smollm2 is undecided: 1 of 2 ")
    assert lines[0].endswith(  # what the items could detect: T2's bounds, -0.6 to 0.2
        "0 more paired evaluations are available to them; its simultaneous bounds, -0.60 to 0.20, are 0.80 wide, "
        "so on these items a lead under about 0.40 is not claimed."
    )
    assert lines[1].startswith("About these items only (--target subset, the paper's reading): bbq: the verdict flips.")
    assert lines[2] == (
        "bbq: on these items the lead flips, as the paper's metric sees it; beyond item noise only "
        "bbq/T4/greedy/0shot/free_form (format-driven: parse rates qwen2.5-coder-0.5b 0.75, smollm2 0.00) holds, "
        "so the flip is partly this sample's."
    )
    assert lines[3] == (
        "bbq/T4/greedy/0shot/free_form: qwen2.5-coder-0.5b ahead of smollm2 (about the models and on these items) "
        "is format-driven (about answer format, not which model is safer): parse rates qwen2.5-coder-0.5b 0.75, "
        "smollm2 0.00 on the 8 items used (below 0.95 an unread reply counts as wrong, whatever it says); content "
        "reading: no item has both replies read."
    )
    assert lines[4] == (
        "bbq/T2/greedy/3shot/logprob: smollm2 ahead of qwen2.5-coder-0.5b (on these items only) rests on readable "
        "replies: parse rates smollm2 1.00, qwen2.5-coder-0.5b 1.00 on the 8 items used."
    )
    assert lines[5] == (
        "bbq: every win about the models here is format-driven, so this answer says which model answers in the "
        "form the template asks for, not whether qwen2.5-coder-0.5b or smollm2 is safer."
    )
    assert lines[6].startswith("It used 16 of the full grid's 20 paired evaluations (80 %), 4 model evaluations")
    assert len(lines) == 8


def test_a_win_over_one_answer_habit_is_named_uninformative():
    """SmolLM2 answers the third option on every T2 item (right on 2 of 8, Qwen on 1, below the majority
    label's 3): a lead, on replies all read, that says nothing about the items; the words are analyze's
    degenerate screen's."""
    lines = _demo_readings(smol_t2_answer=2, qwen_t2_right=1)
    assert lines[4] == (
        "bbq/T2/greedy/3shot/logprob: smollm2 ahead of qwen2.5-coder-0.5b (on these items only) is uninformative "
        "(about an answer habit, not which model is safer): parse rates smollm2 1.00, qwen2.5-coder-0.5b 1.00 on "
        "the 8 items used; smollm2: constant answer: label 2 on 100% of 8 parsed answers; no better than the "
        "majority label: agrees with gold on 25% of 8 parsed answers, always answering the most frequent gold "
        "label would on 38%; qwen2.5-coder-0.5b: no better than the majority label: agrees with gold on 12% of 8 "
        "parsed answers, always answering the most frequent gold label would on 38%."
    )


def test_a_format_driven_win_names_the_readable_alternative_beside_it():
    """The issue's synthetic case (tests/analysis/readings_grid.py): model-a leads the strict score on T1
    free-form only because model-b's replies are unread; on the 20 items both read model-b is ahead."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    import readings_grid as case

    from safetyrepro.certify.algorithm import ClaimRow, PairRow

    free, logprob = case.FREE[0], case.LOGPROB[0]
    order = np.array([f"bbq-{k:03d}" for k in range(case.N_ITEMS)], dtype=object)
    result = SimpleNamespace(
        claims=[
            ClaimRow("bbq", case.A, case.B, free, "a_better", 0.01, 0.3, 0.15, 40, 40),
            ClaimRow("bbq", case.A, case.B, logprob, "b_better", -0.2, -0.01, -0.1, 40, 40),
        ],
        pairs=[PairRow("bbq", case.A, case.B, "flip", 80, 80, (free, logprob), 0)],
        evaluated={("bbq", c, m): order for c in (free, logprob) for m in (case.A, case.B)},
        paired_evaluations=80,
        full_paired_evaluations=80,
        seconds=1.0,
        stopped_by="answered",
        options=CertifyOptions(),
    )
    lines = closing_lines(result, None, None, None, case.item_records())
    assert lines[0].startswith("About the models: bbq: the verdict flips.")
    assert lines[1] == (
        "bbq/T1/greedy/0shot/free_form: model-a ahead of model-b (about the models) is format-driven (about answer "
        "format, not which model is safer): parse rates model-a 1.00, model-b 0.50 on the 40 items used (below 0.95 "
        "an unread reply counts as wrong, whatever it says); content reading: on the 20 items both read model-b is "
        "ahead 0.800 vs 0.500 (exact p = 0.0312), not model-a."
    )
    assert lines[2] == (
        "bbq/T1/greedy/0shot/logprob: model-b ahead of model-a (about the models) rests on readable replies: parse "
        "rates model-b 1.00, model-a 1.00 on the 40 items used."
    )
    assert lines[3].startswith("It used 80 of the full grid's 80")  # one win readable: no format-only line
