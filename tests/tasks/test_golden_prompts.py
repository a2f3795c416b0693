"""Each benchmark's first scored item, rendered under T1-T4, against the golden text committed in the
benchmark's own folder (`golden_prompts.txt`: a new benchmark stays one folder).

Plain text (models with no chat template) at 0 shots, and the chat messages at 3 shots under T2
(system role, demonstrations as turns). Set UPDATE_GOLDEN=1 to rewrite after a deliberate change,
then read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from safetyrepro.tasks.benchmarks.registry import BENCHMARKS, get_benchmark
from safetyrepro.tasks.subsets import item_set

GOLDEN_FILE = "golden_prompts.txt"


def golden_path(benchmark: str) -> Path:
    import sys

    return Path(sys.modules[type(get_benchmark(benchmark)).__module__].__file__).with_name(GOLDEN_FILE)


def render_golden(benchmark: str) -> str:
    bench, s = get_benchmark(benchmark), item_set(benchmark)
    item = s.items[0]
    parts = [f"# {benchmark} {item.id} gold={bench.gold(item)}"]
    for t in ("T1", "T2", "T3", "T4"):
        parts.append(f"## {t} plain 0-shot | candidates={json.dumps(bench.candidates(item, t), ensure_ascii=False)}")
        parts.append(bench.prompt(item, t).plain())
    parts.append("## T2 chat messages 3-shot")
    parts.append(json.dumps(bench.prompt(item, "T2", s.demos_for(3)).messages(), indent=1, ensure_ascii=False))
    return "\n".join(parts) + "\n"


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_rendered_prompts_match_golden(benchmark, data_dir):
    path = golden_path(benchmark)
    text = render_golden(benchmark)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no {path}: run UPDATE_GOLDEN=1 pytest {__file__} -k {benchmark}, then read it"
    assert text == path.read_text(encoding="utf-8")
