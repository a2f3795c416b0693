"""Each registered benchmark is one self-explaining folder: definition, card, README with the paper
and runnable commands; its direction and extra metrics are declared once and computed as declared."""

from __future__ import annotations

import pytest

from safetyrepro.tasks.benchmark import BETTER, Benchmark
from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.subsets import item_set
from safetyrepro.tasks.templates import TEMPLATE_KINDS


@pytest.mark.parametrize("name", BENCHMARKS)
def test_the_folder_holds_definition_card_and_readme(name):
    bench = get_benchmark(name)
    assert isinstance(bench, Benchmark) and bench.folder.name == name
    assert {"__init__.py", "definition.py", "tasks.py", "card.md", "README.md"} <= {
        p.name for p in bench.folder.iterdir()
    }
    readme = (bench.folder / "README.md").read_text(encoding="utf-8")
    assert "Paper" in readme and "arxiv.org" in readme
    assert f"inspect eval safetyrepro/{name} " in readme and f"--tasks safetyrepro_{name}_t" in readme
    assert f"safetyrepro sweep --models smollm2 --benchmarks {name}" in readme
    for spec in bench.extra_metrics:
        assert f"`{spec.name}`" in readme


@pytest.mark.parametrize("name", BENCHMARKS)
def test_directions_templates_and_scorings_are_declared(name):
    bench = get_benchmark(name)
    assert bench.better in BETTER and all(m.better in BETTER for m in bench.extra_metrics)
    assert len({m.name for m in bench.extra_metrics}) == len(bench.extra_metrics)
    assert set(bench.templates) == set(TEMPLATE_KINDS)
    assert bench.default_scoring in bench.scorings


def test_crows_pairs_is_better_closer_to_half_and_the_rest_higher():
    assert {b: get_benchmark(b).better for b in BENCHMARKS if b != "crows_pairs"} == dict.fromkeys(
        [b for b in BENCHMARKS if b != "crows_pairs"], "higher"
    )
    assert get_benchmark("crows_pairs").better == "closer_to_0.5"


@pytest.mark.parametrize("name", BENCHMARKS)
def test_extra_metrics_are_computed_as_declared(name, data_dir):
    bench, s = get_benchmark(name), item_set(name)
    items = list(s.items[:40])
    values = bench.compute_extra_metrics(items, [bench.gold(it) for it in items])
    assert set(values) == {m.name for m in bench.extra_metrics}


def test_a_reasoning_template_is_read_from_its_trait_not_its_name():
    bench = get_benchmark("toxigen")
    reasoning = [t for t, k in TEMPLATE_KINDS.items() if k.reasoning]
    assert reasoning == ["T4"]
    item = type("I", (), {"id": "x", "toxic": True})()
    assert bench.answer_text(item, "T4", 1) == "Answer: Yes" and bench.answer_text(item, "T1", 1) == "Yes"
    assert bench.parse("Let me think.\nAnswer: No", item, "T4") == 0
