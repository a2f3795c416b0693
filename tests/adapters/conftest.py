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
    test: {d / "data.jsonl"}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
""")
    return d
