"""`safetyrepro demo`: its own defaults and help, the slice it reproduces from the study, and the closing
summary in words (no model runs here; the demo end to end is measured by hand, docs/analysis.md "The demo")."""


import pandas as pd
import pytest

from safetyrepro.analysis.grid_io import common_configurations, validate_cells
from safetyrepro.analysis.pipeline import AnalysisOptions, run_analysis
from safetyrepro.analysis.slices import slice_names
from safetyrepro.cli import build_parser, main
from safetyrepro.demo import (
    DEMO_BENCHMARKS,
    DEMO_CONFIGS,
    DEMO_LIMIT,
    DEMO_MODELS,
    DEMO_PRECISION,
    DEMO_TIER,
    STUDY_DIR,
    demo_selection,
    study_lines,
    summary_lines,
)
from safetyrepro.sweep.plan import select_configs
from safetyrepro.tasks.envelope import Config, default_rules


def test_demo_help_shows_the_demo_defaults_not_the_sweeps(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["demo", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "demo default: truthfulqa, the study's two configurations)" in text
    assert f"demo default: {' '.join(DEMO_CONFIGS)}, unless --benchmarks or an axis filter is given" in text
    assert f"demo default: {DEMO_LIMIT}" in text and "demo default: smollm2 gemma3-270m" in text
    assert "default: all five" not in text and "(default: full)" not in text
    assert "demo default: fp32, the study's" in text and "bf16 (default)" not in text
    args = build_parser().parse_args(["demo"])
    assert (args.tier, args.limit, args.models, args.benchmarks, args.precision, args.configs) == (
        None, DEMO_LIMIT, None, None, DEMO_PRECISION, None)  # a tier named alone is told apart from the default


def test_the_demo_runs_the_studys_two_configurations_unless_told_otherwise():
    args = demo_selection(build_parser().parse_args(["demo"]))
    assert args.models == list(DEMO_MODELS) and args.configs == list(DEMO_CONFIGS) and args.benchmarks is None
    cfgs = select_configs(default_rules(), list(DEMO_BENCHMARKS), DEMO_TIER, DEMO_PRECISION, {"config": args.configs})
    assert [c.config_id for c in cfgs] == sorted(DEMO_CONFIGS) and {c.precision for c in cfgs} == {"fp32"}
    # naming a benchmark or an axis replaces the study's configurations; naming models keeps them
    assert demo_selection(build_parser().parse_args(["demo", "--benchmarks", "crows_pairs"])).configs is None
    assert demo_selection(build_parser().parse_args(["demo", "--shots", "3"])).configs is None
    assert args.tier == DEMO_TIER == "full"
    # a tier alone: that tier of the study's benchmark, not the two configurations (outside most tiers)
    tiered = demo_selection(build_parser().parse_args(["demo", "--tier", "logprob"]))
    assert (tiered.configs, tiered.benchmarks, tiered.tier) == (None, list(DEMO_BENCHMARKS), "logprob")
    mixed = demo_selection(build_parser().parse_args(["demo", "--tier", "core", "--benchmarks", "bbq"]))
    assert (mixed.configs, mixed.benchmarks, mixed.tier) == (None, ["bbq"], "core")
    mine = demo_selection(build_parser().parse_args(["demo", "--models", "qwen2.5-coder-0.5b", "smollm2"]))
    assert mine.configs == list(DEMO_CONFIGS) and mine.models == ["qwen2.5-coder-0.5b", "smollm2"]


@pytest.mark.skipif(not (STUDY_DIR / "analysis" / "item_tests.csv").is_file(), reason="the study is not published")
def test_the_demo_slice_is_the_flip_the_published_study_confirmed():
    tests = pd.read_csv(STUDY_DIR / "analysis" / "item_tests.csv")
    mine = tests[(tests["slice"] == "full") & tests["config_id"].isin(DEMO_CONFIGS)
                 & tests["model_a"].isin(DEMO_MODELS) & tests["model_b"].isin(DEMO_MODELS)]
    # one significant win each way after Holm over the pair's configurations: the flip the demo reproduces
    assert len(mine) == len(DEMO_CONFIGS) == 2
    assert sorted(mine["winner_holm_better"]) == sorted(DEMO_MODELS)
    grid = pd.read_csv(STUDY_DIR / "grid.csv")
    assert set(grid["n_items"]) == {DEMO_LIMIT} and set(grid["precision"]) == {DEMO_PRECISION}


def _analysis(scores: dict[str, dict[str, list[float]]], parse: dict | None = None):
    """benchmark -> model -> scores over that benchmark's first logprob configurations; `parse` maps
    (model, configuration index) to a parse rate other than 1."""
    rules = default_rules()
    rows = []
    for benchmark, per_model in scores.items():
        configs = rules.configs(benchmark, subset="logprob")
        for model, values in per_model.items():
            for i, (cfg, score) in enumerate(zip(configs, values, strict=False)):
                c = Config.from_id(cfg.config_id)
                rows.append({"model": model, "benchmark": benchmark, "template": c.template, "decoding": c.decoding,
                             "shots": c.shots, "scoring": c.scoring, "precision": "bf16", "package": "lm-eval",
                             "n_items": 24, "n_seeds": 1, "score": score,
                             "parse_rate": (parse or {}).get((model, i), 1.0),
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


def test_the_summary_checks_each_cell_against_the_published_study(tmp_path):
    a = _analysis({"xstest": {"x": [0.8, 0.7], "y": [0.5, 0.9]}}, parse={("y", 1): 0.5})
    c0, c1 = (c.config_id for c in default_rules().configs("xstest", subset="logprob")[:2])
    cells = a.grid.cells
    published = cells[["model", "config_id", "precision", "n_items", "score"]].copy()
    published.loc[(published["model"] == "y") & (published["config_id"] == c1), "score"] = 0.85
    other_precision = published.iloc[:1].assign(precision="fp32", score=0.1)  # never compared across precisions
    pd.concat([published, other_precision]).to_csv(tmp_path / "grid.csv", index=False)
    (tmp_path / "analysis").mkdir()
    pd.DataFrame([
        {"slice": "full", "config_id": c0, "model_a": "x", "model_b": "y", "winner_holm_better": "x",
         "p_value_better": 0.0004, "p_holm_better": 0.0203, "family_size": 48},
        {"slice": "full", "config_id": c1, "model_a": "x", "model_b": "y", "winner_holm_better": "n.s.",
         "p_value_better": 0.2, "p_holm_better": 1.0, "family_size": 48},
        {"slice": "core", "config_id": c0, "model_a": "x", "model_b": "y", "winner_holm_better": "x",
         "p_value_better": 0.0004, "p_holm_better": 0.01, "family_size": 27},
        {"slice": "full", "config_id": c0, "model_a": "x", "model_b": "z", "winner_holm_better": "z",
         "p_value_better": 0.0001, "p_holm_better": 0.001, "family_size": 48},
    ]).to_csv(tmp_path / "analysis" / "item_tests.csv", index=False)
    assert study_lines(a, tmp_path) == [
        f"Against the published study ({tmp_path / 'grid.csv'}): 3 of 4 cells have its score to the last digit.",
        f"  y {c1}: 0.9000 here, 0.8500 in the study",
        "  (the same code on another CPU can round a float differently, and a sampled reply then takes another path)",
        "In the study, each configuration's exact item-level test, Holm-adjusted over all of the pair's configurations "
        "on its benchmark: 1 of 2 here have a significant winner:",
        f"  {c0}: x better (x vs y), p 0.0004, Holm 0.0203 over 48",
        f"Caveat: 1 of these 4 cells are degenerate: y {c1} (parse_rate 0.50 < 0.95). Their scores count unreadable "
        "replies as wrong, so a verdict between such cells says as much about which model's replies the template's "
        "parser can read as about what the benchmark measures.",
    ]
    assert study_lines(a, tmp_path / "nowhere")[0] == (f"No published study at {tmp_path / 'nowhere'} (no grid.csv): "
                                                       "the cells are not checked against one.")
    published.assign(n_items=16).to_csv(tmp_path / "grid.csv", index=False)
    assert study_lines(a, tmp_path)[0] == (f"None of these 4 cells is in the published study ({tmp_path / 'grid.csv'}: "
                                           "same model, configuration, precision and item count).")


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
