"""Fixtures for the cross-package tests: synthetic per-item records and package metadata in the
shapes the real stacks write, and a ChatML-like tokenizer stand-in."""

from __future__ import annotations

import copy

import pytest

from safetyrepro.crosspkg.records import ItemRecord

SYS = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class ChatMLTokenizer:
    """Enough of a HF tokenizer for Table 8: a ChatML chat template with a default system prompt."""

    chat_template = "chatml"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        out = ""
        if messages[0]["role"] != "system":
            out += f"<|im_start|>system\n{SYS}<|im_end|>\n"
        for m in messages:
            out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def chat(text: str) -> str:
    return ChatMLTokenizer().apply_chat_template([{"role": "user", "content": text}])


def rec(pkg, bench, key, options, gold, choice, prompt="", output="", **meta):
    return ItemRecord(
        pkg, bench, key, key, list(options), [gold], choice, choice is not None and choice == gold, prompt, output, meta
    )


@pytest.fixture
def native():
    """Three stacks on TruthfulQA: three items each, partly overlapping."""
    opts = ["right", "wrong", "worse"]
    lm = [
        rec("lm-eval", "truthfulqa", f"truthfulqa:q{i}", opts, 0, c, prompt=f"Q: q{i}\nA:")
        for i, c in enumerate([0, 1, 0])
    ]
    helm = [
        rec(
            "helm",
            "truthfulqa",
            f"truthfulqa:q{i}",
            opts,
            0,
            c,
            prompt=chat(f"Question: q{i}\nA. right\nAnswer:"),
            output="A",
            request={"temperature": 0.0, "max_tokens": 96, "stop_sequences": [], "num_completions": 1},
        )
        for i, c in zip([1, 2, 3], [0, None, None], strict=True)
    ]
    insp = [
        rec(
            "inspect",
            "truthfulqa",
            f"truthfulqa:q{i}",
            opts,
            0,
            c,
            prompt=chat("Answer the following ..."),
            user_prompt="Answer the following multiple choice question.",
        )
        for i, c in zip([2, 3, 4], [0, 0, 1], strict=True)
    ]
    lm_meta = {
        "tasks": {"truthfulqa": "truthfulqa_mc1"},
        "results": {
            "configs": {
                "truthfulqa_mc1": {
                    "output_type": "multiple_choice",
                    "doc_to_choice": "{{mc1_targets.choices}}",
                    "target_delimiter": " ",
                    "description": "",
                    "doc_to_text": "{% set prompt_qa = '...' %}",
                    "num_fewshot": 0,
                    "validation_split": "validation",
                    "metric_list": [{"metric": "acc"}],
                }
            },
            "n-shot": {"truthfulqa_mc1": 0},
        },
        "invocation": {
            "apply_chat_template": False,
            "system_instruction": None,
            "fewshot_as_multiturn": True,
            "gen_kwargs": None,
            "limit": 3,
        },
    }
    helm_meta = {
        "specs": {
            "truthfulqa": {
                "adapter_spec": {
                    "method": "multiple_choice_joint",
                    "instructions": "",
                    "input_prefix": "Question: ",
                    "output_prefix": "Answer: ",
                    "reference_prefix": "A. ",
                    "max_train_instances": 0,
                    "output_mapping_pattern": None,
                },
                "metric_specs": [{"class_name": "helm.benchmark.metrics.basic_metrics.BasicGenerationMetric"}],
                "scenario_spec": {
                    "class_name": "helm.benchmark.scenarios.truthful_qa_scenario.TruthfulQAScenario",
                    "args": {"task": "mc_single"},
                },
            }
        },
        "chat_template_applied": True,
        "sent_temperature": 1e-07,
    }
    insp_meta = {
        "meta": {
            "truthfulqa": {
                "plan": {"steps": [{"solver": "multiple_choice"}]},
                "model_generate_config": {"max_tokens": 96, "seed": 42},
                "model_args": {"dtype": "bfloat16"},
                "eval": {
                    "scorers": [{"name": "choice"}],
                    "dataset": {"name": "truthfulqa", "samples": 817, "shuffled": True},
                    "config": {"limit": 3},
                },
            }
        }
    }
    return {
        "lm-eval": {"records": {"truthfulqa": lm}, "meta": lm_meta},
        "helm": {"records": {"truthfulqa": helm}, "meta": helm_meta},
        "inspect": {"records": {"truthfulqa": insp}, "meta": insp_meta},
    }


@pytest.fixture
def tokenizer():
    return ChatMLTokenizer()


def clone(native):
    return copy.deepcopy(native)
