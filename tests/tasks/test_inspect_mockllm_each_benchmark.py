"""Every registered benchmark's Inspect task, end to end through `inspect_ai.eval` on Inspect's own
`mockllm/model`, as Inspect's evaluation suites test theirs: a reply naming the gold answer scores 1
and parses, a reply naming another answer scores 0 and still parses, and text that names no answer
scores 0 and does not parse. A logprob-only benchmark is refused on mockllm, with what to use instead."""

from __future__ import annotations

import pytest
from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, get_model

from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.inspect_task_registry import TASKS
from safetyrepro.tasks.subsets import item_set

N = 3


class _Words:
    """mockllm counts input tokens with tiktoken's o200k_base, which tiktoken downloads on first use;
    offline (this machine, CI) a word count stands in: the counts only feed Inspect's usage record."""

    def encode(self, text: str, **_) -> list[str]:
        return text.split()


@pytest.fixture(autouse=True)
def offline_token_counts(monkeypatch):
    import tiktoken

    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: _Words())


def _same_gold_items(benchmark: str):
    """N items that share the gold answer index and its reply text, so that one constant reply is right
    (or wrong) for all of them whatever order Inspect runs them in."""
    bench = get_benchmark(benchmark)
    by_reply: dict[tuple[int, str], list] = {}
    for it in item_set(benchmark).items:
        g = bench.gold(it)
        by_reply.setdefault((g, bench.answer_text(it, "T1", g)), []).append(it)
    (gold, reply), items = max(by_reply.items(), key=lambda kv: len(kv[1]))
    assert len(items) >= N
    return gold, reply, items[:N]


def _run(benchmark: str, reply: str | None, ids: list[str], tmp_path, scoring: str = "free_form"):
    outputs = [ModelOutput.from_content("mockllm/model", reply)] * len(ids) if reply is not None else []
    model = get_model("mockllm/model", custom_outputs=outputs, memoize=False)
    return inspect_eval(
        TASKS[benchmark](template="T1", scoring=scoring),
        model=model,
        sample_id=ids,
        log_dir=str(tmp_path),
        display="none",
    )[0]


def _metrics(log) -> dict[str, float]:
    return {k: v.value for s in log.results.scores for k, v in s.metrics.items()}


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_each_benchmark_runs_end_to_end_on_mockllm(benchmark, tmp_path, data_dir):
    bench = get_benchmark(benchmark)
    if "free_form" not in bench.scorings:
        ids = [it.id for it in item_set(benchmark).items[:N]]
        with pytest.raises(Exception, match="use --model safetyrepro/<model>"):
            log = _run(benchmark, None, ids, tmp_path, scoring="logprob")
            if log.status == "error":  # Inspect may record the refusal in the log instead of raising it
                raise RuntimeError(log.error.message)
        return
    gold, reply, items = _same_gold_items(benchmark)
    ids = [it.id for it in items]
    log = _run(benchmark, reply, ids, tmp_path)
    assert log.status == "success", log.error
    assert sorted(s.id for s in log.samples) == sorted(ids)
    m = _metrics(log)
    assert m["accuracy"] == 1.0 and m["parse_rate"] == 1.0, m
    other = bench.answer_text(items[0], "T1", (gold + 1) % len(bench.labels(items[0])))
    m = _metrics(_run(benchmark, other, ids, tmp_path))
    assert m["accuracy"] == 0.0 and m["parse_rate"] == 1.0, m
    junk = "Hmm."  # names no answer (a refusal-detecting benchmark such as XSTest reads it as compliance)
    parsed = [bench.parse(junk, it, "T1") for it in items]
    m = _metrics(_run(benchmark, junk, ids, tmp_path))
    assert m["parse_rate"] == sum(p is not None for p in parsed) / N, m
    assert m["accuracy"] == sum(p == gold for p in parsed) / N, m


@pytest.mark.parametrize("benchmark", [b for b in BENCHMARKS if "free_form" in get_benchmark(b).scorings])
def test_each_folders_task_file_runs_by_path(benchmark, tmp_path, data_dir, monkeypatch):
    """`inspect eval safetyrepro_tasks/benchmarks/<name>/tasks.py`: the folder's @task is an ordinary
    Inspect task file, found and run by path as in inspect_evals, scoring the same as the registered task."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)  # Inspect resolves a task file relative to the working folder
    gold, reply, items = _same_gold_items(benchmark)
    model = get_model(
        "mockllm/model", custom_outputs=[ModelOutput.from_content("mockllm/model", reply)] * N, memoize=False
    )
    log = inspect_eval(
        f"safetyrepro_tasks/benchmarks/{benchmark}/tasks.py",
        model=model,
        task_args={"template": "T1", "scoring": "free_form"},
        sample_id=[it.id for it in items],
        log_dir=str(tmp_path),
        display="none",
    )[0]
    assert log.status == "success", log.error
    assert log.eval.task.endswith(benchmark)
    assert _metrics(log)["accuracy"] == 1.0
