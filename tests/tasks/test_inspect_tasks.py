"""Inspect tasks are built from the same definitions: same items, same messages, same candidates."""

from __future__ import annotations

from typing import Literal

import pytest

from safetyrepro.compat.inspect_ai import PrerequisiteError
from safetyrepro.errors import UserError
from safetyrepro.tasks.benchmarks.registry import get_benchmark
from safetyrepro.tasks.inspect_tasks import benchmark_task
from safetyrepro.tasks.subsets import item_set


@pytest.mark.parametrize(
    "benchmark,template,scoring,shots",
    [
        ("bbq", "T2", "free_form", 3),
        ("truthfulqa", "T4", "logprob", 5),
        ("crows_pairs", "T1", "logprob", 3),
        ("toxigen", "T3", "free_form", 0),
        ("xstest", "T2", "logprob", 3),
    ],
)
def test_samples_carry_our_messages_and_candidates(benchmark, template, scoring, shots, data_dir):
    task = benchmark_task(benchmark, template, scoring, shots)
    bench, s = get_benchmark(benchmark), item_set(benchmark)
    samples = list(task.dataset)
    assert [x.id for x in samples] == [i.id for i in s.items]
    first, item = samples[0], s.items[0]
    ours = bench.prompt(item, template, s.demos_for(shots)).messages()
    assert [(m.role, m.text) for m in first.input] == [(m["role"], m["content"]) for m in ours]
    assert first.metadata["candidates"] == bench.candidates(item, template)
    assert first.target == bench.labels(item)[bench.gold(item)]
    assert task.metadata["subset_id"] == s.subset_id


def test_generation_settings_come_from_the_rules(data_dir):
    task = benchmark_task("bbq", "T4", "free_form", 0)
    assert task.config.max_tokens == 256 and task.config.temperature == 0.0
    assert task.config.stop_seqs == ["\n\nPassage:"]


@pytest.mark.parametrize(
    "args,message",
    [
        (("crows_pairs", "T1", "free_form", 0), "allows scoring logprob only"),
        (("bbq", "T5", "logprob", 0), "unknown template 'T5'"),
        (("xstest", "T1", "logprob", 4), "unknown shots 4"),
    ],
)
def test_bad_parameters_are_one_clear_message(args, message):
    with pytest.raises(PrerequisiteError, match=message):
        benchmark_task(*args)


def test_inspect_cli_refuses_logprob_with_sampling_in_one_line(tmp_path, data_dir):
    import os
    import subprocess
    import sys
    from pathlib import Path

    inspect = Path(sys.executable).with_name("inspect")
    res = subprocess.run(
        [
            str(inspect),
            "eval",
            "safetyrepro/xstest",
            "--model",
            "mockllm/model",
            "--limit",
            "1",
            "-T",
            "scoring=logprob",
            "--temperature",
            "0.7",
            "--log-dir",
            str(tmp_path),
            "--display",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "logprob scoring is greedy-only" in out and "Traceback" not in out
    res = subprocess.run(
        [
            str(inspect),
            "eval",
            "safetyrepro/xstest",
            "--model",
            "mockllm/model",
            "--limit",
            "1",
            "-T",
            "scoring=logprob",
            "--log-dir",
            str(tmp_path),
            "--display",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert res.returncode != 0 and "use --model safetyrepro/<model>" in res.stdout + res.stderr


def test_inspect_cli_reports_a_missing_mirror_in_one_line(tmp_path):
    """Data problems surface while Inspect builds the task: one message, not a traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    inspect = Path(sys.executable).with_name("inspect")
    missing = tmp_path / "no-mirror"
    res = subprocess.run(
        [
            str(inspect),
            "eval",
            "safetyrepro/xstest",
            "--model",
            "mockllm/model",
            "--limit",
            "1",
            "--log-dir",
            str(tmp_path),
            "--display",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400", "SAFETYREPRO_DATA_DIR": str(missing)},
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"safetyrepro/xstest: data mirror {missing}" in out and "is not a directory" in out
    assert "Traceback" not in out


def test_one_task_per_registered_benchmark_with_its_own_literal_parameters():
    import inspect
    import typing

    from safetyrepro.tasks.benchmarks.registry import BENCHMARKS
    from safetyrepro.tasks.inspect_task_registry import TASKS
    from safetyrepro.tasks.inspect_tasks import EXTRA_METRICS

    assert tuple(TASKS) == BENCHMARKS
    for name, fn in TASKS.items():
        bench, params = get_benchmark(name), inspect.signature(fn).parameters
        assert typing.get_args(params["scoring"].annotation) == bench.scorings
        assert typing.get_args(params["template"].annotation) == tuple(bench.templates)
        assert params["scoring"].default == bench.default_scoring
    assert set(EXTRA_METRICS) == {m.name for b in BENCHMARKS for m in get_benchmark(b).extra_metrics}


def _task_with(**overrides):
    """A stand-in for a folder's @task function, with one parameter changed."""
    import inspect

    def xstest(
        template: Literal["T1", "T2", "T3", "T4"] = "T1",
        scoring: Literal["free_form", "logprob"] = "free_form",
        shots: Literal[0, 3, 5] = 0,
        tie_rule: Literal["expected", "first"] = "expected",
        fewshot_draw: Literal["fixed", "per_item"] = "fixed",
    ):
        return None

    sig = inspect.signature(xstest, eval_str=True)
    params = [p.replace(**overrides[p.name]) if p.name in overrides else p for p in sig.parameters.values()]
    xstest.__signature__ = sig.replace(parameters=params)
    return xstest


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({}, None),
        ({"template": {"annotation": Literal["T1", "T2", "T3"]}}, "template is .*Literal\\['T1', 'T2', 'T3', 'T4'\\]"),
        ({"scoring": {"default": "logprob"}}, "scoring defaults to 'logprob'; the definition says 'free_form'"),
        ({"shots": {"annotation": int}}, "shots is <class 'int'>"),
    ],
)
def test_a_folder_task_that_disagrees_with_the_definition_is_refused(overrides, message):
    from safetyrepro.tasks.inspect_task_registry import check_task

    fn = _task_with(**overrides)
    if message is None:
        check_task("xstest", fn)
    else:
        with pytest.raises(UserError, match=message):
            check_task("xstest", fn)
    with pytest.raises(UserError, match="must be named 'bbq'"):
        check_task("bbq", _task_with())


def test_a_folder_without_its_task_file_is_named_in_one_line(monkeypatch):
    import importlib

    from safetyrepro.tasks import inspect_task_registry as reg

    real = importlib.import_module

    def without_task_file(name, *a, **k):
        if name.endswith(".xstest.tasks"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(reg.importlib, "import_module", without_task_file)
    with pytest.raises(UserError, match="benchmark folder 'xstest' has no tasks.py"):
        reg.load_task("xstest")
    assert reg.load_task("bbq").__name__ == "bbq"
