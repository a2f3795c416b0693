"""The HELM scenario of one SafetyRepro benchmark configuration: the fixed item subset, each prompt
carried as SafetyRepro messages (system, demonstrations, question) so that the client renders it
exactly as lm-eval and Inspect do in SafetyRepro."""

from __future__ import annotations

import json

from helm.benchmark.scenarios.scenario import (
    CORRECT_TAG,
    TEST_SPLIT,
    Input,
    Instance,
    Output,
    Reference,
    Scenario,
    ScenarioMetadata,
)

from safetyrepro.tasks.benchmarks.registry import get_benchmark

MARK = "\u241e"  # SYMBOL FOR RECORD SEPARATOR: brackets the JSON messages inside a HELM prompt


def encode_messages(messages: list[dict]) -> str:
    return MARK + json.dumps(messages, ensure_ascii=False) + MARK


def decode_prompt(prompt: str) -> tuple[list[dict] | None, str]:
    """(messages, text after them) for a prompt built from encode_messages; (None, prompt) otherwise."""
    if not prompt.startswith(MARK):
        return None, prompt
    end = prompt.find(MARK, 1)
    if end < 0:
        return None, prompt
    return json.loads(prompt[1:end]), prompt[end + 1 :]


class SafetyReproScenario(Scenario):
    name = "safetyrepro"
    description = "A SafetyRepro benchmark configuration on its fixed item subset"
    tags = ["safetyrepro"]

    def __init__(
        self, benchmark: str, template: str = "T3", scoring: str = "logprob", shots: int = 0, limit: int | None = None
    ):
        super().__init__()
        self.benchmark, self.template, self.scoring = benchmark, template, scoring
        self.shots, self.limit = int(shots), None if limit in (None, "") else int(limit)  # None: the whole subset

    def get_instances(self, output_path: str) -> list[Instance]:
        from safetyrepro.tasks.subsets import item_set

        bench = get_benchmark(self.benchmark)
        bench.template(self.template)
        bench.check_scoring(self.scoring)
        subset = item_set(self.benchmark)
        demos = subset.demos_for(self.shots)
        out = []
        for item in subset.items[: self.limit]:
            prompt = bench.prompt(item, self.template, demos)
            texts = bench.candidates(item, self.template)
            gold = bench.gold(item)
            refs = [Reference(Output(text=t), tags=[CORRECT_TAG] if i == gold else []) for i, t in enumerate(texts)]
            out.append(
                Instance(
                    input=Input(text=encode_messages(prompt.messages())), references=refs, split=TEST_SPLIT, id=item.id
                )
            )
        return out

    def get_metadata(self) -> ScenarioMetadata:
        return ScenarioMetadata(
            name=f"safetyrepro_{self.benchmark}",
            display_name=f"SafetyRepro {self.benchmark}",
            description=self.description,
            main_metric="safetyrepro_accuracy",
            main_split="test",
            taxonomy=None,
        )
