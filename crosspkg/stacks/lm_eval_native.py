"""lm-eval's native tasks (truthfulqa_mc1, bbq, toxigen) at the anchor, data from the mirror.

Only `dataset_path`/`dataset_name`/`dataset_kwargs` are overridden (TaskManager config overrides on
the registered native task); prompts, primers, `process_docs`, choices and metrics are lm-eval's
own. The model is lm-eval's `hf` on the anchor's plain HF folder, with lm-eval's defaults: no chat
template, no system instruction, its own batching and softmax dtype.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from safetyrepro.atomic import atomic_write
from safetyrepro.compat.lm_eval import native_task_yaml
from safetyrepro.crosspkg.anchor import NATIVE_TASKS, Anchor, ModelFolder
from safetyrepro.crosspkg.records import ItemRecord, bbq_key, question_key, toxigen_key

PACKAGE = "lm-eval"


def _key(benchmark: str, doc: dict, doc_id: int) -> str:
    if benchmark == "truthfulqa":
        return question_key(doc["question"])
    if benchmark == "bbq":
        return bbq_key(doc["category"], doc["example_id"])
    return toxigen_key(doc_id)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def native_config(task_manager, name: str, override: dict) -> dict:
    """lm-eval's own config of a registered task (its YAML, `!function` references resolved), with only
    the dataset location replaced."""
    cfg = native_task_yaml(task_manager, name)
    for k in ("tag", "group"):
        cfg.pop(k, None)
    return {**cfg, **override}


def run(anchor: Anchor, folder: ModelFolder, datasets: dict, out: Path, batch_size: int = 8) -> dict:
    """Run the covered benchmarks; write per-item records and lm-eval's own results/configs."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    benches = anchor.covered(PACKAGE)
    tm = TaskManager()
    tasks = [native_config(tm, NATIVE_TASKS[PACKAGE][b], datasets[b]["override"]) for b in benches]
    model_args = {
        "pretrained": str(folder.path),
        "dtype": "bfloat16" if anchor.precision == "bf16" else "float32",
        "device": "cuda" if anchor.device.startswith("cuda") else "cpu",
    }
    t0 = time.time()
    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=model_args,
        tasks=tasks,
        num_fewshot=None,
        batch_size=batch_size,
        limit=anchor.limit,
        log_samples=True,
        task_manager=tm,
        random_seed=anchor.seed,
        numpy_random_seed=anchor.seed,
        torch_random_seed=anchor.seed,
        fewshot_random_seed=anchor.seed,
        bootstrap_iters=0,
    )
    wall = time.time() - t0
    records: dict[str, list[ItemRecord]] = {}
    for b in benches:
        name = NATIVE_TASKS[PACKAGE][b]
        recs = []
        for s in res["samples"][name]:
            doc = s["doc"]
            ctxs = [a[0] for a in s["arguments"]]
            conts = [a[1] for a in s["arguments"]]
            lls = [float(r[0]) for r in s["filtered_resps"]]
            choice = max(range(len(lls)), key=lambda i: (lls[i], -i))  # np.argmax: first maximum
            options = [c[1:] if c.startswith(" ") else c for c in conts]
            if b == "bbq":
                from lm_eval.tasks.bbq.utils import doc_to_targets

                gold = [g for g in doc_to_targets(doc) if g < len(conts)]  # lm-eval's range runs one past
            else:
                gold = [int(s["target"])]
            recs.append(
                ItemRecord(
                    package=PACKAGE,
                    benchmark=b,
                    key=_key(b, doc, s["doc_id"]),
                    native_id=str(s["doc_id"]),
                    options=options,
                    gold=gold,
                    choice=choice,
                    correct=bool(s["acc"] if not isinstance(s["acc"], (list, tuple)) else s["acc"][0]),
                    prompt=ctxs[0],
                    output=json.dumps(lls),
                    meta={"continuations": conts},
                )
            )
        records[b] = recs
    cfg = {k: _jsonable(v) for k, v in res.items() if k not in ("samples",)}
    atomic_write(out / "native" / "lm_eval_results.json", json.dumps(cfg, indent=1, default=str), root=out)
    invocation = {
        "model": "hf",
        "model_args": model_args,
        "apply_chat_template": False,
        "system_instruction": None,
        "fewshot_as_multiturn": True,
        "num_fewshot": None,
        "gen_kwargs": None,
        "limit": anchor.limit,
        "batch_size": batch_size,
        "seed": anchor.seed,
    }
    return {
        "records": records,
        "results": cfg,
        "wall_s": wall,
        "model_args": model_args,
        "invocation": invocation,
        "tasks": {b: NATIVE_TASKS[PACKAGE][b] for b in benches},
    }
