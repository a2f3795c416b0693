"""The project's answer to package non-equivalence: one configuration, one measurement.

For every benchmark × template × scoring (greedy), lm-eval and Inspect, both on the SafetyRepro
engine with SmolLM2 and no output cache between them, must send the model the same input and get
the same per-item predictions and cell score.
"""

from __future__ import annotations

import logging

import pytest

from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.envelope import Config, default_rules

pytestmark = pytest.mark.slow
RULES = default_rules()
CONFIGS = [c for c in RULES.configs() if c.decoding == "greedy" and c.shots == 3]


@pytest.fixture(scope="module")
def pair(data_dir, fast_precision):
    from safetyrepro.adapters.engine.engine import load_engine
    from safetyrepro.equivalence import PackagePair

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    return PackagePair(load_engine("smollm2", fast_precision))  # equal inputs give equal outputs at either


def test_every_benchmark_template_scoring_combination_is_compared():
    want = {(b, t, s) for b in RULES.benchmarks for t in RULES.axes["template"] for s in get_benchmark(b).scorings}
    assert {(c.benchmark, c.template, c.scoring) for c in CONFIGS} == want and len(CONFIGS) == len(want)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.config_id)
def test_lm_eval_and_inspect_agree(pair, cfg: Config):
    report = pair.compare(cfg, n_items=2)
    assert report.prompts_equal and report.predictions_equal, report.describe()
    assert report.equivalent, report.describe()


@pytest.mark.parametrize("config_id", ["bbq/T2/greedy/0shot/free_form", "xstest/T3/greedy/5shot/logprob"])
def test_other_shot_counts_agree_too(pair, config_id):
    assert pair.compare(Config.from_id(config_id), n_items=3).equivalent


def test_each_items_own_examples_reach_the_model_alike_through_both_packages(pair, data_dir):
    """--fewshot-draw per_item: lm-eval (the sampler handed the document) and Inspect (each sample's messages)
    send the model the same prompts, item by item, and these are not the fixed draw's."""
    from safetyrepro.equivalence import PackagePair

    per_item = PackagePair(pair.outer, fewshot_draw="per_item")
    cfg = Config.from_id("bbq/T2/greedy/3shot/logprob")
    report = per_item.compare(cfg, n_items=3)
    assert report.prompts_equal and report.predictions_equal and report.equivalent, report.describe()
    ids = [it.id for it in per_item.items_for("bbq").items[:3]]
    fixed = {r.item_id: r.prompt_sha256 for r in pair.lm_eval.run_cell(cfg, (0,), ids)}
    drawn = {r.item_id: r.prompt_sha256 for r in per_item.lm_eval.run_cell(cfg, (0,), ids)}
    assert all(fixed[i] != drawn[i] for i in ids)
