"""`safetyrepro demo`: its defaults and help, why it asks what it asks (the published study's reading of
the pair), and its closing lines (no model runs here; the demo end to end is measured by hand,
docs/measured.md)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from safetyrepro.certify.algorithm import BenchmarkProblem, CertifyOptions, certify
from safetyrepro.cli import build_parser, main
from safetyrepro.demo import (
    DEMO_BENCHMARKS,
    DEMO_BUDGET,
    DEMO_FILTERS,
    DEMO_MODELS,
    DEMO_PRECISION,
    STUDY,
    closing_lines,
    demo_selection,
)
from safetyrepro.sweep.plan import select_configs
from safetyrepro.tasks.envelope import default_rules

REPO = Path(__file__).resolve().parents[1]


def test_demo_help_shows_the_demo_defaults_not_the_sweeps(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "demo default: bbq)" in text and "demo default: qwen2.5-coder-0.5b smollm2)" in text
    assert "demo default: T2 T4, unless --benchmarks, --configs or another axis is given" in text
    assert f"demo default: {DEMO_BUDGET}" in text and "demo default: fp32, the studies'" in text
    assert "default: all five" not in text and "bf16 (default)" not in text
    args = build_parser().parse_args(["demo"])
    assert (args.models, args.benchmarks, args.precision, args.templates) == (None, None, DEMO_PRECISION, None)


def test_the_demo_certifies_its_eight_configurations_unless_told_otherwise():
    args = demo_selection(build_parser().parse_args(["demo"]))
    assert args.models == list(DEMO_MODELS) and args.benchmarks == list(DEMO_BENCHMARKS)
    filters = {"template": args.templates, "decoding": args.decodings, "shots": args.shots}
    cfgs = select_configs(default_rules(), args.benchmarks, args.tier, DEMO_PRECISION, filters)
    assert sorted(c.config_id for c in cfgs) == sorted(
        f"bbq/{t}/greedy/{k}shot/{s}" for t in ("T2", "T4") for k in (0, 3) for s in ("free_form", "logprob"))
    # naming a benchmark, an axis or configurations replaces the demo's slice; naming models keeps it
    mine = demo_selection(build_parser().parse_args(["demo", "--benchmarks", "xstest"]))
    assert mine.benchmarks == ["xstest"] and mine.templates is None
    assert demo_selection(build_parser().parse_args(["demo", "--shots", "5"])).templates is None
    other = demo_selection(build_parser().parse_args(["demo", "--models", "gemma3-270m", "smollm2"]))
    assert other.models == ["gemma3-270m", "smollm2"] and other.templates == DEMO_FILTERS["templates"]


def test_the_question_is_the_one_the_published_study_raised():
    """The demo's reason, from the first study's records (docs/study/items.parquet, 24 items): SmolLM2
    led by 29 points with T2 at three shots (log-probabilities), Qwen by 29 points with T4 at zero shots,
    every one of Qwen's wins there on an item SmolLM2 got wrong."""
    items = pd.read_parquet(REPO / "docs/study/items.parquet")
    qwen, smol = DEMO_MODELS
    means = items[items["benchmark"] == "bbq"].groupby(["config_id", "model", "item_id"])["item_score"].mean()

    def diff(cid):
        d = means.loc[cid, qwen] - means.loc[cid, smol]
        return round(float(d.mean()), 4), round(float((d != 0).mean()), 4)

    assert diff("bbq/T2/greedy/3shot/logprob") == (round(-7 / 24, 4), round(15 / 24, 4))
    assert diff("bbq/T4/greedy/0shot/free_form") == (round(7 / 24, 4), round(7 / 24, 4))


def _flip_result():
    """A certified flip on two configurations of a 100-item subset, built as a live run would be."""
    ids = tuple(f"bbq/{i:03d}" for i in range(100))
    rng = np.random.default_rng(0)
    scores = {("c1", "a"): rng.random(100) < 0.8, ("c1", "b"): rng.random(100) < 0.3,
              ("c2", "a"): rng.random(100) < 0.3, ("c2", "b"): rng.random(100) < 0.8}

    def oracle(bench, cid, model, items):
        return np.array([float(scores[(cid, model)][ids.index(i)]) for i in items])

    problem = BenchmarkProblem("bbq", ("c1", "c2"), ("a", "b"), ids, 1)
    return certify([problem], oracle, CertifyOptions(order="subset", batch=10))


def test_the_closing_lines_say_the_verdict_its_cost_and_where_the_study_is():
    result = _flip_result()
    lines = closing_lines(result, 104.4)
    assert result.pairs[0].verdict == "flip"
    assert lines[0].startswith("bbq: the verdict flips. a is ahead of b on c1 (by at least +0.")
    assert "and b ahead of a on c2 (by at least +0." in lines[0]
    n, full = result.paired_evaluations, result.full_paired_evaluations
    assert full == 200 and n < full
    assert lines[1] == (f"It needed {n:,} of the full grid's 200 paired evaluations ({100 * n / 200:.0f} %) and "
                        f"{result.seconds:.0f} s of evaluation; scoring the whole grid would take about 104.4 h here. "
                        "Every claim holds with probability at least 0.95, all together.")
    assert lines[2].endswith(f"{STUDY}.") and (REPO / STUDY).is_file()


def test_openmp_threads_sleep_when_idle_unless_the_user_chose(monkeypatch):
    from safetyrepro import demo

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert demo.quiet_openmp_waits() is False
    assert demo.os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(demo.sys, "modules", {k: v for k, v in demo.sys.modules.items() if k != "torch"})
    assert demo.quiet_openmp_waits() is True and demo.os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
