"""An inspect_evals-style task for the tests of `verdict` and the early-stopping manager: not one of
SafetyRepro's benchmarks. Arithmetic questions; `generate()` and Inspect's own `match()` scorer.

    inspect eval tests/arithmetic_task.py --model mockllm/model

`answer_rule(skill, seed)` is a stand-in model for `mockllm/model`'s `custom_outputs`: it reads the question
and answers it right with probability `skill` (a seeded draw per call), else one more than the answer."""

from __future__ import annotations

import random
import re

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput, ModelUsage
from inspect_ai.scorer import match
from inspect_ai.solver import generate

QUESTION = re.compile(r"What is (\d+) ([+-]) (\d+)\?")


def record_to_sample(i: int) -> Sample:
    x, y = 3 + (7 * i) % 41, 2 + (11 * i) % 29
    sign = "+" if i % 2 == 0 else "-"
    return Sample(
        id=f"q{i}", input=f"What is {x} {sign} {y}? Answer with the number only.", target=str(_value(x, sign, y))
    )


def _value(x: int, sign: str, y: int) -> int:
    return x + y if sign == "+" else x - y


@task
def arithmetic(n: int = 60) -> Task:
    """`n` questions, in the dataset's order."""
    return Task(dataset=MemoryDataset([record_to_sample(i) for i in range(n)]), solver=generate(), scorer=match())


def answer_rule(skill: float, seed: int = 0):
    """custom_outputs for mockllm/model: right with probability `skill`, else off by one."""
    rng = random.Random(seed)

    def answer(messages, tools, tool_choice, config) -> ModelOutput:
        text = str(messages[-1].content if isinstance(messages[-1].content, str) else messages[-1].text)
        m = QUESTION.search(text)
        value = _value(int(m[1]), m[2], int(m[3])) if m else 0
        out = ModelOutput.from_content("mockllm", str(value if rng.random() < skill else value + 1))
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)  # no token count (tiktoken: a download)
        return out

    return answer
