"""`safetyrepro demo`: its own defaults and help, and the closing summary in words (no model runs
here; the demo end to end is measured by hand, README "Performance")."""

import pandas as pd
import pytest

from safetyrepro.analysis.grid_io import common_configurations, validate_cells
from safetyrepro.analysis.pipeline import AnalysisOptions, run_analysis
from safetyrepro.analysis.slices import slice_names
from safetyrepro.cli import build_parser, main
from safetyrepro.demo import DEMO_BENCHMARKS, DEMO_LIMIT, DEMO_TIER, native_bf16_cpu, summary_lines
from safetyrepro.tasks.envelope import Config, default_rules


def test_demo_help_shows_the_demo_defaults_not_the_sweeps(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "demo default: crows_pairs)" in text and "demo default: logprob, 12 configurations" in text
    assert f"demo default: {DEMO_LIMIT}" in text and "demo default: smollm2 gemma3-270m" in text
    assert "default: all five" not in text and "(default: full)" not in text
    assert "demo default: bf16 on a GPU or a CPU with native bf16" in text and "bf16 (default)" not in text
    args = build_parser().parse_args(["demo"])
    assert (args.tier, args.limit, args.models, args.benchmarks, args.precision) == (DEMO_TIER, DEMO_LIMIT, None, None,
                                                                                     None)
    assert tuple(DEMO_BENCHMARKS) == ("crows_pairs",)
    # the demo's slice spans 12 configurations per benchmark (the report needs at least one such)
    rules = default_rules()
    assert all(len(rules.configs(b, subset=DEMO_TIER)) == 12 for b in DEMO_BENCHMARKS)


def test_bf16_is_the_demo_precision_only_where_the_cpu_multiplies_it_natively():
    assert native_bf16_cpu("flags : fpu sse avx2 fma avx512f avx512_bf16")
    assert native_bf16_cpu("flags : fpu amx_bf16 amx_tile")
    assert not native_bf16_cpu("flags : fpu sse avx2 fma")


def _analysis(scores: dict[str, dict[str, list[float]]]):
    """benchmark -> model -> scores over that benchmark's first logprob configurations."""
    rules = default_rules()
    rows = []
    for benchmark, per_model in scores.items():
        configs = rules.configs(benchmark, subset="logprob")
        for model, values in per_model.items():
            for cfg, score in zip(configs, values, strict=False):
                c = Config.from_id(cfg.config_id)
                rows.append({"model": model, "benchmark": benchmark, "template": c.template, "decoding": c.decoding,
                             "shots": c.shots, "scoring": c.scoring, "precision": "bf16", "package": "lm-eval",
                             "n_items": 24, "n_seeds": 1, "score": score, "parse_rate": 1.0,
                             "tier": rules.tier(c), "config_id": c.config_id})
    grid = common_configurations(validate_cells(pd.DataFrame(rows), rules, "demo"), "demo", rules)
    return run_analysis(grid, rules, AnalysisOptions(slices=slice_names(rules), n_resamples=10))


def test_the_summary_says_which_verdicts_flipped_and_which_way_is_better():
    a = _analysis({
        # crows_pairs, closer to 0.5 is better: distances x .10 .10 .05 .20 / y .05 .20 .10 .10
        "crows_pairs": {"x": [0.60, 0.40, 0.55, 0.70], "y": [0.55, 0.70, 0.40, 0.60]},
        # xstest: x always ahead
        "xstest": {"x": [0.8, 0.7, 0.9, 0.6], "y": [0.5, 0.4, 0.6, 0.3]},
    })
    lines = summary_lines(a)
    assert lines[0] == ("crows_pairs (closer to 0.5 is better (0.5 = unbiased), 4 configurations): 1 of 1 pairwise "
                        "verdicts flip with the configuration; 2 of 2 strict orderings of the models reached.")
    # x closer on configs 2 (.10 < .20) and 3 (.05 < .10), y on 1 (.05 < .10) and 4 (.10 < .20): 2-2 of 4
    assert lines[1] == ("  x vs y: x is closer to 0.5 on 2, y on 2 of 4 configurations "
                        "(rho_flip 0.500, chance 0.312)")
    assert lines[2] == "xstest (higher is better, 4 configurations): no verdict flipped; 1 of 2 strict orderings of the models reached."


def test_the_summary_says_honestly_when_nothing_flipped():
    a = _analysis({"xstest": {"x": [0.8, 0.7, 0.9, 0.6], "y": [0.5, 0.4, 0.6, 0.3]}})
    lines = summary_lines(a)
    assert lines[-1].startswith("Nothing flipped: in every pair one model was never strictly behind")


def test_a_tie_is_never_reported_as_an_ordering():
    # b leads wherever the two differ; config 2 ties: one strict ordering, and the tie said as such
    a = _analysis({"xstest": {"b": [0.8, 0.5, 0.9, 0.6], "a": [0.5, 0.5, 0.6, 0.3]}})
    assert summary_lines(a)[0] == ("xstest (higher is better, 4 configurations): no verdict flipped; 1 of 2 strict "
                                   "orderings of the models reached, and 1 configuration(s) tie some models.")


def test_openmp_threads_sleep_when_idle_unless_the_user_chose(monkeypatch):
    from safetyrepro import demo

    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert demo.quiet_openmp_waits() is False
    assert demo.os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setattr(demo.sys, "modules", {k: v for k, v in demo.sys.modules.items() if k != "torch"})
    assert demo.quiet_openmp_waits() is True and demo.os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
