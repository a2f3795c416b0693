"""Inspect at the anchor: inspect_evals' truthfulqa and bbq task definitions on the mirror's records,
Inspect's built-in `multiple_choice()` solver and `choice()` scorer, Inspect's own `hf/` provider.

inspect_evals is not installed here (its loaders read the Hugging Face hub), so its two task
functions are reproduced from inspect_evals 0.28.0 (`src/inspect_evals/{truthfulqa,bbq}`):

- truthfulqa: `hf_dataset("truthfulqa/truthful_qa", "multiple_choice", split="validation",
  shuffle=True, seed=42, shuffle_choices=42)`, mc1 targets, `multiple_choice()`, `choice()`.
  Substituted: the dataset path (a parquet of the same records, same order, from the mirror's v0
  `mc_task.json`), read through Inspect's own `hf_dataset`, so the sample shuffle and the choice
  shuffle are Inspect's. Sample ids: inspect_evals' `create_stable_id` (a hash of the question)
  is not importable; the record index is used instead (ids do not affect scoring).
- bbq: the 11 `heegyu/bbq` subsets in inspect_evals' order, no shuffle, input
  "Context: ...\\n\\nQuestion: ...", choices ans0-2, target letter of `label`, ids
  `<Category>_<example_id:05d>`. Substituted: the records come from the mirror's category files
  (9 of 11 categories; 3 partial).

Decoding is what the provider does with the anchor: `temperature=0` cannot reach HF generate with
the provider's default `do_sample=True` (transformers rejects it), so the package-default run
leaves temperature unset and is sampled with the model's generation_config (seeded with the
anchor's seed); inspect-ai 0.3.285 also has a `do_sample` model arg, and the `greedy` variant
runs with `-M do_sample=False`, which is the anchor's greedy decoding in Inspect's own terms.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from safetyrepro.crosspkg.anchor import Anchor, ModelFolder
from safetyrepro.crosspkg.native_data import INSPECT_BBQ_SUBSETS, bbq_category_rows
from safetyrepro.crosspkg.records import ItemRecord, bbq_key, question_key

PACKAGE = "inspect"
VARIANTS = ("default", "greedy")  # default: provider's do_sample=True as it is; greedy: -M do_sample=False
INSPECT_EVALS_VERSION = "0.28.0"


def truthfulqa_task(parquet: str, shuffle_seed: int = 42):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample, hf_dataset
    from inspect_ai.scorer import choice
    from inspect_ai.solver import multiple_choice

    def record_to_sample(record):
        labels = record["mc1_targets"]["labels"]
        return Sample(
            input=record["question"],
            choices=list(record["mc1_targets"]["choices"]),
            target=[chr(ord("A") + i) for i, v in enumerate(labels) if v == 1],
            metadata={"question": record["question"]},
        )

    from inspect_ai.dataset import MemoryDataset

    dataset = hf_dataset(
        path="parquet",
        split="validation",
        data_files={"validation": parquet},
        sample_fields=record_to_sample,
        shuffle=True,
        seed=shuffle_seed,
        shuffle_choices=shuffle_seed,
        auto_id=True,
        cached=False,
    )
    dataset = MemoryDataset(samples=list(dataset), name="truthfulqa/truthful_qa", location=parquet, shuffled=True)
    return Task(dataset=dataset, solver=[multiple_choice(multiple_correct=False)], scorer=choice(), name="truthfulqa")


def bbq_task():
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import choice
    from inspect_ai.solver import multiple_choice

    samples = []
    for subset in INSPECT_BBQ_SUBSETS:
        for r in bbq_category_rows(subset):
            samples.append(
                Sample(
                    input=f"Context: {r['context']}\n\nQuestion: {r['question']}",
                    target=chr(ord("A") + int(r["label"])),
                    choices=[r["ans0"], r["ans1"], r["ans2"]],
                    id=f"{subset}_{int(r['example_id']):05d}",
                    metadata={
                        "source_id": r["example_id"],
                        "category": r["category"],
                        "context_condition": r["context_condition"],
                    },
                )
            )
    return Task(
        dataset=MemoryDataset(samples=samples, name="bbq"), solver=[multiple_choice()], scorer=choice(), name="bbq"
    )


def generate_config(anchor: Anchor, variant: str) -> dict:
    """What crosspkg asks Inspect for (the anchor in Inspect's terms)."""
    cfg = {"max_tokens": anchor.max_new_tokens, "seed": anchor.seed}
    return cfg


def model_args(anchor: Anchor, variant: str) -> dict:
    args: dict[str, object] = {
        "dtype": "bfloat16" if anchor.precision == "bf16" else "float32",
        "device": "cuda:0" if anchor.device.startswith("cuda") else "cpu",
    }
    if variant == "greedy":
        args["do_sample"] = False
    return args


def run(anchor: Anchor, folder: ModelFolder, datasets: dict, out: Path, variant: str = "default") -> dict:
    import inspect_ai
    from inspect_ai.log import read_eval_log

    benches = anchor.covered(PACKAGE)
    tasks = []
    for b in benches:
        tasks.append(
            truthfulqa_task(str(datasets["truthfulqa"]["file"]), anchor.seed) if b == "truthfulqa" else bbq_task()
        )
    log_dir = out / "native" / f"inspect_logs_{variant}"
    t0 = time.time()
    logs = inspect_ai.eval(
        tasks,
        model=f"hf/{folder.path}",
        model_args=model_args(anchor, variant),
        limit=anchor.limit,
        log_dir=str(log_dir),
        log_format="json",
        display="none",
        **generate_config(anchor, variant),
    )
    wall = time.time() - t0
    records: dict[str, list[ItemRecord]] = {}
    meta: dict[str, dict] = {}
    from transformers import AutoTokenizer

    # Any: transformers types apply_chat_template's result as every form it has; tokenize=False gives a str
    tok: Any = AutoTokenizer.from_pretrained(folder.path)
    for b, log in zip(benches, logs, strict=True):
        if log.status != "success":
            raise RuntimeError(f"Inspect {b} run failed: {log.error.message if log.error else log.status}")
        log = read_eval_log(log.location)
        recs = []
        for s in log.samples or []:
            # dataset-level shuffle_choices reorders sample.choices and the target before the solver,
            # so the logged choices are in the order the prompt lists them
            user = next(m for m in s.messages if m.role == "user")
            presented = list(s.choices or [])
            completion = s.output.completion if s.output else ""
            sc = next(iter((s.scores or {}).values()))
            from safetyrepro.compat.inspect_ai import parse_multiple_choice_answers

            letters = parse_multiple_choice_answers(completion, presented)
            choice = ord(next(iter(letters))) - 65 if letters else None
            target = s.target if isinstance(s.target, list) else [s.target]
            gold_texts = {(s.choices or [])[ord(t) - 65] for t in target}
            gold = [i for i, o in enumerate(presented) if o in gold_texts]
            if b == "truthfulqa":
                key = question_key(s.metadata.get("question", s.input if isinstance(s.input, str) else ""))
            else:
                key = bbq_key(s.metadata["category"], s.metadata["source_id"])
            msgs = [{"role": m.role, "content": m.text} for m in s.messages if m.role in ("system", "user")]
            sent = (
                tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
                if tok.chat_template
                else "\n".join(m["content"] for m in msgs)
            )
            recs.append(
                ItemRecord(
                    package=PACKAGE if variant == "default" else f"{PACKAGE}-{variant}",
                    benchmark=b,
                    key=key,
                    native_id=str(s.id),
                    options=presented,
                    gold=gold,
                    choice=choice,
                    correct=sc.value == "C",
                    prompt=sent,
                    output=completion,
                    meta={"user_prompt": user.text, "inspect_score": sc.value},
                )
            )
        records[b] = recs
        meta[b] = {
            "log": str(log.location),
            "eval": json.loads(log.eval.model_dump_json()),
            "plan": json.loads(log.plan.model_dump_json()) if log.plan else None,
            "model_generate_config": json.loads(log.eval.model_generate_config.model_dump_json(exclude_none=True)),
            "model_args": log.eval.model_args,
        }
    return {
        "records": records,
        "meta": meta,
        "wall_s": wall,
        "variant": variant,
        "model_args": model_args(anchor, variant),
        "generate_config": generate_config(anchor, variant),
    }
