"""The early-stopping manager on real Inspect evals of an inspect_evals-style task (tests/arithmetic_task.py,
240 samples) on mockllm/model, two answer rules standing in for two models (quick: mockllm answers at once):
with a large true difference it stops well before the end, Inspect records the samples it stopped, and its
decision is the log's early-stopping summary, whose numbers a sequence fed from the log's own samples
reproduces."""

from __future__ import annotations

import numpy as np
import pytest
from arithmetic_task import answer_rule, arithmetic

from safetyrepro.sequential.confidence_sequence import IidBettingCS
from safetyrepro.stopping import stop_when_certified, stop_when_known, with_anytime_stopping

N = 240


def _eval(task, skill: float, seed: int, log_dir):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    model = get_model("mockllm/model", custom_outputs=answer_rule(skill, seed))
    (log,) = inspect_eval(task, model=model, log_dir=str(log_dir), display="none")
    assert log.status == "success", log.error
    return log


def _scores(log) -> dict[str, float]:
    return {str(s.id): 1.0 if s.scores["match"].value == "C" else 0.0 for s in log.samples}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The reference model's full run: right on about 30 % of the samples."""
    return _eval(arithmetic(n=N), 0.3, 1, tmp_path_factory.mktemp("reference"))


def test_a_certified_difference_stops_early_and_the_summary_is_in_the_log(reference, tmp_path):
    from inspect_ai.log import read_eval_log

    manager = stop_when_certified(reference.location)
    log = _eval(with_anytime_stopping(arithmetic(n=N), manager, seed=3), 0.9, 2, tmp_path)
    log = read_eval_log(log.location)  # what a reader of the file gets
    summary = log.results.early_stopping
    assert summary is not None and summary.manager == "safetyrepro.stopping"
    meta = summary.metadata
    assert meta["stopped"] is True and meta["decision"]["claim"] == "a_better"
    assert meta["samples"] == N and meta["stopped_after"] < N / 4  # a difference of about 0.6: certified early
    assert len(summary.early_stops) > N / 2 and len(log.samples) + len(summary.early_stops) == N
    assert meta["decision"]["p_values"]["not_evaluated_better"] <= 0.05
    assert "anytime" in meta["sentence"] and meta["reference"]["model"] == "mockllm/model"
    assert meta["order"].startswith("shuffled by with_anytime_stopping (seed 3)")
    # the decision again, from the log's own samples: the first stopped_after samples in the eval's order
    mine, ref = _scores(log), _scores(reference)
    order = [str(i) for i in log.eval.dataset.sample_ids]
    first = order[: meta["stopped_after"]]
    assert set(first) <= set(mine)
    cs = IidBettingCS(1, 0.05 / 2, -1.0, 1.0, extra=(0.0,))
    for sid in first:
        cs.update([0], [mine[sid] - ref[sid]])
    assert float(np.exp(-cs.log_e_above(0.0)[0])) == pytest.approx(meta["decision"]["p_values"]["not_evaluated_better"])
    assert meta["decision"]["estimate"] == pytest.approx(np.mean([mine[s] - ref[s] for s in first]))


def test_the_mean_known_within_a_width_stops_early(tmp_path):
    log = _eval(with_anytime_stopping(arithmetic(n=N), stop_when_known(width=0.3)), 0.9, 4, tmp_path)
    meta = log.results.early_stopping.metadata
    assert meta["stopped"] is True and meta["decision"]["claim"] == "known"
    assert meta["decision"]["upper"] - meta["decision"]["lower"] <= 0.3
    assert meta["stopped_after"] < N and len(log.results.early_stopping.early_stops) > 0


def test_one_rule_for_several_models_keeps_each_eval_apart_at_once_or_in_turn(tmp_path):
    """eval(..., model=[strong, weak]) with one manager, the two evals running at once (max_tasks=2): each
    gets its own sequence, so the weak model's mean is its own (about 0.2), not mixed with the strong one's;
    the same object used again for a later eval starts afresh rather than stopping every sample."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    manager = stop_when_known(width=0.3)
    strong = get_model("mockllm/model", custom_outputs=answer_rule(0.95, 1))
    weak = get_model("mockllm/model", custom_outputs=answer_rule(0.1, 2), memoize=False)
    logs = inspect_eval(
        with_anytime_stopping(arithmetic(n=N), manager),
        model=[strong, weak],
        log_dir=str(tmp_path),
        display="none",
        max_tasks=2,
    )
    means = sorted(log.results.early_stopping.metadata["decision"]["estimate"] for log in logs)
    assert [log.status for log in logs] == ["success", "success"]
    assert means[0] < 0.3 and means[1] > 0.8
    assert not manager.runs  # each eval's state dropped at its end
    (again,) = inspect_eval(
        with_anytime_stopping(arithmetic(n=N), manager), model=strong, log_dir=str(tmp_path), display="none"
    )
    meta = again.results.early_stopping.metadata
    assert again.status == "success" and meta["stopped"] is True and meta["decision"]["estimate"] > 0.8
    assert len(again.samples) >= meta["stopped_after"] > 0


def test_a_misspelt_scorer_is_refused_before_any_sample_runs(tmp_path):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    calls = []

    def rule(*args):
        calls.append(1)
        return answer_rule(0.9, 1)(*args)

    model = get_model("mockllm/model", custom_outputs=rule)
    (log,) = inspect_eval(
        with_anytime_stopping(arithmetic(n=20), stop_when_known(width=0.3, scorer="mtach")),
        model=model,
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "error" and not calls
    assert "scorer 'mtach' is not one of the task's scorers (match) (did you mean 'match'?)" in log.error.message


def test_a_failed_sample_is_named_in_the_summary_and_the_rest_still_count(tmp_path):
    """Sample q3 errors (fail_on_error=False lets the eval go on): the samples after it wait for its turn, so the
    rule cannot stop the eval; the summary names q3 as never scored instead of blaming the rule, and its final
    numbers read every scored sample."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    right = answer_rule(0.95, 1)

    def rule(messages, *rest):
        if "What is 24 - 6?" in str(messages[-1].content):  # q3's question
            raise RuntimeError("the provider failed on this sample")
        return right(messages, *rest)

    model = get_model("mockllm/model", custom_outputs=rule)
    from inspect_ai import task_with

    (log,) = inspect_eval(
        task_with(arithmetic(n=60), early_stopping=stop_when_known(width=0.3)),
        model=model,
        log_dir=str(tmp_path),
        display="none",
        fail_on_error=False,
    )
    meta = log.results.early_stopping.metadata
    assert meta["stopped"] is False and meta["unscored"] == 1 and meta["unscored_examples"] == ["q3"]
    assert meta["final"]["n"] == 59  # every scored sample, q3 skipped
    assert "1 sample(s) were never scored (first: q3; errored or cancelled)" in meta["sentence"]
    assert meta["met_after_skipping"] is not None and "too late to stop the eval" in meta["sentence"]
    assert "was not met" not in meta["sentence"]


def test_rule_parameters_that_are_not_finite_are_refused_in_one_line():
    for kwargs in (
        {"width": 0.1, "high": float("inf")},
        {"width": float("nan")},
        {"width": 0.1, "alpha": float("nan")},
    ):
        with pytest.raises(ValueError, match="must be a finite number"):
            stop_when_known(**kwargs)


def test_a_stopped_log_gives_a_paired_verdict_that_says_the_stop_was_chosen_by_the_data(reference, tmp_path, capsys):
    """Issue 53: `verdict` on an early-stopped log (its unrun samples are Inspect's early stops, not a partial log)
    pairs the samples it ran and says that a fixed-n test at a data-chosen stop is not valid there, with the
    log's own anytime-valid decision beside it."""
    from safetyrepro.cli import main

    log = _eval(
        with_anytime_stopping(arithmetic(n=N), stop_when_certified(reference.location), seed=3), 0.9, 2, tmp_path
    )
    ran = len(log.samples)
    assert ran < N
    rc = main(["verdict", log.location, reference.location, "--labels", "strong", "weak"])
    out = capsys.readouterr().out
    assert rc == 0
    assert f"these {ran} items find" in out
    assert (
        f"arithmetic: A's eval was stopped early ({N - ran} of the other run's item-epoch records were never run by "
        "it): paired on the items it ran. The rule that stopped it looked at these items, so the fixed-n test here "
        "is not valid at that data-chosen stop; its early stopping's decision (anytime-valid, in the log): the "
        "evaluated model is better than the reference" in out
    )


def test_a_stopped_log_of_a_safetyrepro_task_imports_as_the_samples_it_ran(tmp_path):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    from safetyrepro.cli import main
    from safetyrepro.tasks.inspect_task_registry import TASKS

    def comply(*args) -> ModelOutput:
        out = ModelOutput.from_content("mockllm", "Answer: comply")
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # no token count (tiktoken: a download)
        return out

    model = get_model("mockllm/model", custom_outputs=comply)
    (log,) = inspect_eval(
        with_anytime_stopping(TASKS["xstest"](template="T1"), stop_when_known(width=0.6)),
        model=model,
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    stops = log.results.early_stopping.early_stops
    assert log.status == "success" and stops
    assert main(["import", "inspect", log.location, "--out", str(tmp_path / "grid")]) == 0
    import pandas as pd

    grid = pd.read_csv(tmp_path / "grid" / "grid.csv")
    assert grid["n_items"].tolist() == [len(log.samples)]
    assert len(log.samples) + len(stops) == len(log.eval.dataset.sample_ids)
