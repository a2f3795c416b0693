"""Each item is scored once, by the benchmark (`score_logprob`, `score_free_form`): lm-eval's per-sample
metrics carry the prediction and the tie (`top_answer_share`, `tie_rate`), which the sweep records and the
importer read instead of parsing the replies again; the aggregate `top_answer_share` is the analysis's
constant-answer share."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from safetyrepro.tasks.benchmark import ItemScore, top_answer_share
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.subsets import item_set


def test_item_scores_by_hand(data_dir):
    bench, s = get_benchmark("bbq"), item_set("bbq")
    item = s.items[0]
    gold = bench.gold(item)
    other = (gold + 1) % 3
    lls = [-5.0, -5.0, -5.0]
    lls[gold] = lls[other] = -1.0  # gold tied with one other candidate at the top
    first = min(gold, other)
    assert bench.score_logprob(item, lls) == ItemScore(first, 0.5, True, True)
    assert bench.score_logprob(item, lls, "first") == ItemScore(first, float(first == gold), True, True)
    lls[other] = -1.5
    assert bench.score_logprob(item, lls) == ItemScore(gold, 1.0, True, False)
    letter = "ABC"[other]
    assert bench.score_free_form(item, f"{letter}", "T1") == ItemScore(other, 0.0, True, False)
    assert bench.score_free_form(item, "I cannot say.", "T1") == ItemScore(None, 0.0, False, False)


def test_top_answer_share_by_hand():
    assert top_answer_share([0, 0, 1, None]) == pytest.approx(2 / 3)
    assert top_answer_share([2, 2, 2]) == 1.0
    assert math.isnan(top_answer_share([None, None])) and math.isnan(top_answer_share([]))


def test_top_answer_share_is_the_analysis_top_share():
    from safetyrepro.analysis.paired.significance import _option_bias

    preds = {"c1": [0, 0, 1, None, 0, 2], "c2": [1, 1, 1, 1, 1, 1]}
    frame = pd.DataFrame(
        [
            {"model": "m", "config_id": c, "item_id": f"i{k}", "prediction": p, "gold": 0}
            for c, ps in preds.items()
            for k, p in enumerate(ps)
        ]
    )
    frame["prediction"] = frame["prediction"].astype("Int64")
    bias = _option_bias(frame).set_index("config_id")["top_share"]
    for c, ps in preds.items():
        assert bias[c] == pytest.approx(top_answer_share(ps))


def test_a_cell_without_gold_labels_has_no_majority_share_and_the_others_keep_theirs():
    """A generated answer checked against its text (sweep --task's generated twin) has no gold label index: its
    cell's gold-label share is unknown, where it stopped the screen with an IndexError."""
    from safetyrepro.analysis.paired.significance import _option_bias

    rows = [{"config_id": "lp", "prediction": p, "gold": g} for p, g in [(0, 0), (1, 0), (0, 1), (0, 0)]]
    rows += [{"config_id": "gen", "prediction": None, "gold": None} for _ in range(4)]
    frame = pd.DataFrame([{"model": "m", "item_id": f"i{k % 4}", **r} for k, r in enumerate(rows)])
    frame["prediction"] = frame["prediction"].astype("Int64")
    bias = _option_bias(frame).set_index("config_id")
    assert list(bias.index) == ["lp"] and bias.loc["lp", "gold_top_share"] == 0.75
    assert bias.loc["lp", "top_share"] == 0.75 and bias.loc["lp", "agreement"] == 0.5


class _Scripted:
    """An lm-eval LM that always prefers the first candidate (tied with the second on even documents)
    and always replies "A"."""

    def __new__(cls):
        from lm_eval.api.model import LM

        class Scripted(LM):
            def loglikelihood(self, requests):
                return [
                    (-1.0 if r.idx == 0 or (r.idx == 1 and r.doc_id % 2 == 0) else -4.0 - r.idx, False)
                    for r in requests
                ]

            def loglikelihood_rolling(self, requests):
                raise NotImplementedError

            def generate_until(self, requests):
                return ["A" for _ in requests]

        return Scripted()


@pytest.mark.parametrize("scoring", ["logprob", "free_form"])
def test_lm_eval_samples_carry_the_one_scoring(data_dir, scoring):
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager

    from safetyrepro.lm_eval_plugin import task_dir
    from safetyrepro.tasks.lm_eval_tasks import task_name

    bench, s = get_benchmark("bbq"), item_set("bbq")
    name = task_name("bbq", "T1", scoring)
    manager = TaskManager(include_path=str(task_dir()), include_defaults=False, metadata={"tie_rule": "expected"})
    res = simple_evaluate(
        model=_Scripted(), tasks=[name], limit=6, log_samples=True, task_manager=manager, bootstrap_iters=0
    )
    samples = res["samples"][name]
    assert len(samples) == 6
    scores = []
    for smp in samples:
        item = s.by_id(smp["doc"]["id"])
        gold = bench.gold(item)
        if scoring == "logprob":
            tied = smp["doc_id"] % 2 == 0
            want = ItemScore(0, (float(gold == 0) + float(gold == 1)) / 2 if tied else float(gold == 0), True, tied)
            assert smp["tie_rate"] == float(tied)
        else:
            want = bench.score_free_form(item, "A", "T1")
            assert want.prediction == 0 and "tie_rate" not in smp
        assert (smp["top_answer_share"], smp["acc"], bool(smp["parse_rate"])) == (
            want.prediction,
            want.score,
            want.parsed,
        )
        scores.append(want.score)
    out = res["results"][name]
    assert out["top_answer_share,none"] == 1.0  # one answer to every item: the constant-answer screen's 100 %
    assert out["acc,none"] == pytest.approx(sum(scores) / 6)
    if scoring == "logprob":
        assert out["tie_rate,none"] == pytest.approx(sum(smp["doc_id"] % 2 == 0 for smp in samples) / 6)
