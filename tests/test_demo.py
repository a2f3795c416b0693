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

    assert diff("docs/study/items.parquet", t4, 24) == (round(7 / 24, 4), round(7 / 24, 4))
    assert diff("docs/study/items.parquet", t2, 24) == (round(-7 / 24, 4), round(15 / 24, 4))
    assert diff("docs/study/certified/items.parquet", t2, 300)[0] == round(-13 / 300, 4)


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
    assert 0 < c1.lower and c2.upper < 0
    n, full = result.paired_evaluations, result.full_paired_evaluations
    assert full == 200 and n < full
    assert lines[1] == (
        f"It used {n:,} of the full grid's 200 paired evaluations ({100 * n / 200:.0f} %), in "
        f"{result.seconds:.0f} s of evaluation; scoring the whole grid would take about 104.4 h here. "
        "Every claim holds with probability at least 0.95, all together; the first lines are about the models: "
        "the benchmark's items as draws from the benchmark and seeds as draws from the decoder, so another draw "
        "of items would confirm them."
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
    """docs/certify.md, *The demo*: SmolLM2's T2 3-shot lead is 4.3 points on all 300 items (80 discordant items
    against 93); the subset target certifies it (exactly -13/300), the population target over BBQ's 48
    configurations does not: with every item in, its bounds still hold 0."""
    from safetyrepro.tasks.subsets import item_set

    qwen, smol = DEMO_MODELS
    t2 = DEMO_CONFIGS[1]
    items = pd.read_parquet(REPO / "docs/study/certified/items.parquet")
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
    assert (p.claim, p.items_used, s.claim, s.estimate) == ("undecided", 300, "b_better", round(-13 / 300, 12))
    assert p.lower < 0 < p.upper and population.family_size == 48
