"""HELM at the anchor: `truthful_qa:task=mc_single` and `bbq:subject=all`, both with HELM's default
`multiple_choice_joint` adapter, run by `helm-run` on a local model deployment with HELM's own chat
handling (HuggingFaceClient decides from the tokenizer), scenario data placed where HELM's
downloader finds it.

The anchor is passed through HELM's run expanders: `max_train_instances=0` (HELM's default is 5
in-context examples) and `increase_max_tokens=95` (its joint MC default is max_tokens=1; 1 + 95 = 96).
temperature 0 is HELM's spec default. `--max-eval-instances N` draws N eval instances with HELM's
own `np.random.seed(0)` sampler. What was executed is read back from run_spec.json,
scenario_state.json, per_instance_stats.json and the request cache (the chat-templated prompt
exists only there).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from safetyrepro.atomic import open_text_nofollow
from safetyrepro.crosspkg import helm_env
from safetyrepro.crosspkg.anchor import Anchor, ModelFolder
from safetyrepro.crosspkg.native_data import (
    BBQ_CATEGORIES,
    bbq_category_rows,
    place_helm_scenario_data,
)
from safetyrepro.crosspkg.records import ItemRecord, bbq_key, question_key

PACKAGE = "helm"
SUITE = "anchor"
ENTRIES = {
    "truthfulqa": "truthful_qa:task=mc_single,method=multiple_choice_joint",
    "bbq": "bbq:subject=all,method=multiple_choice_joint",
}


HELM_RUN_DIR = "native/helm"  # under the crosspkg --out folder
MODEL_DIR = "model"  # links to the cached weights (helm_env.helm_model_folder)
HELM_MODEL_DIR = f"{HELM_RUN_DIR}/{MODEL_DIR}"


def run_entries(anchor: Anchor, model: str) -> dict[str, str]:
    expanders = f"max_train_instances={anchor.shots},increase_max_tokens={anchor.max_new_tokens - 1}"
    return {b: f"{ENTRIES[b]},{expanders},model={model},model_deployment={model}" for b in anchor.covered(PACKAGE)}


def prepare(anchor: Anchor, folder: ModelFolder, run_dir: Path) -> dict:
    from transformers import AutoTokenizer

    name = helm_env.model_name(folder.label, folder.weights_sha256)
    hf = helm_env.helm_model_folder(folder.path, run_dir / MODEL_DIR, folder.max_length)
    eos = AutoTokenizer.from_pretrained(hf).eos_token or ""
    device = "cuda" if anchor.device.startswith("cuda") else "cpu"
    prod = helm_env.write_prod_env(run_dir / "prod_env", name, hf, folder.max_length, eos, anchor.precision, device)
    placed = place_helm_scenario_data(run_dir / "benchmark_output")
    return {"model": name, "model_folder": str(hf), "prod_env": prod, "scenario_data": placed}


def run(anchor: Anchor, folder: ModelFolder, out: Path) -> dict:
    bin_dir = helm_env.helm_bin()
    assert bin_dir is not None  # required: helm_bin refuses rather than return None
    run_dir = out / HELM_RUN_DIR
    prep = prepare(anchor, folder, run_dir)
    entries = run_entries(anchor, prep["model"])
    env = helm_env.helm_environment(run_dir)
    cmd = [
        str(bin_dir / "helm-run"),
        "--run-entries",
        *entries.values(),
        "--suite",
        SUITE,
        "--max-eval-instances",
        str(anchor.limit),
        "-o",
        "benchmark_output",
        "--local-path",
        "prod_env",
        "--num-threads",
        "1",
    ]
    t0 = time.time()
    log = run_dir / "helm-run.log"
    with open_text_nofollow(log, "w", root=out) as f:
        proc = subprocess.run(cmd, cwd=run_dir, env=env, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"helm-run failed (exit {proc.returncode}); see {log}")
    wall = time.time() - t0
    with open_text_nofollow(run_dir / "helm-summarize.log", "w", root=out) as f:
        subprocess.run(
            [str(bin_dir / "helm-summarize"), "--suite", SUITE, "-o", "benchmark_output", "--auto-generate-schema"],
            cwd=run_dir,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    records, specs = {}, {}
    sent, sent_keys = sent_prompts(run_dir / "prod_env" / "cache")
    chat = "Automatically set `apply_chat_template` to True" in log.read_text()
    # Any: transformers types apply_chat_template's result as every form it has; tokenize=False gives a str
    tok: Any = None
    for b in entries:
        d = find_run_dir(run_dir / "benchmark_output" / "runs" / SUITE, ENTRIES[b].split(":")[0] + ":")
        recs, spec = read_run(d, b)
        if chat:
            from transformers import AutoTokenizer

            tok = tok or AutoTokenizer.from_pretrained(prep["model_folder"])
        for r in recs:
            r.prompt = (
                tok.apply_chat_template(
                    [{"role": "user", "content": r.meta["adapter_prompt"]}], tokenize=False, add_generation_prompt=True
                )
                if chat
                else r.meta["adapter_prompt"]
            )
            r.meta["prompt_in_request_cache"] = r.prompt in sent
        records[b] = recs
        specs[b] = spec
    temps = sorted({k["temperature"] for k in sent_keys if "temperature" in k})
    return {
        "records": records,
        "specs": specs,
        "entries": entries,
        "wall_s": wall,
        "chat_template_applied": chat,
        "sent_temperature": temps[0] if len(temps) == 1 else temps,
        "sent_request_keys": sorted({k for d in sent_keys for k in d if k != "prompt"}),
        "prepare": prep,
        "command": cmd,
        "log": str(log),
    }


def find_run_dir(suite_dir: Path, prefix: str) -> Path:
    hits = sorted(p for p in suite_dir.iterdir() if p.is_dir() and p.name.startswith(prefix))
    if not hits:
        raise RuntimeError(f"no HELM run folder starting with {prefix!r} in {suite_dir}")
    return hits[-1]


def sent_prompts(cache_dir: Path) -> tuple[set[str], list[dict]]:
    """The prompts HELM's HF client actually tokenised (chat template applied) and the raw request keys
    (temperature as sent to transformers, max_new_tokens, ...), from its request cache."""
    out: set[str] = set()
    keys: list[dict] = []
    for db in cache_dir.glob("*.sqlite"):
        con = sqlite3.connect(db)
        try:
            for (k,) in con.execute("select key from unnamed"):
                try:
                    d = json.loads(k)
                except ValueError:
                    continue
                if isinstance(d, dict) and "prompt" in d:
                    out.add(d["prompt"])
                    keys.append(d)
        finally:
            con.close()
    return out, keys


def _bbq_index() -> dict[tuple, str]:
    idx = {}
    for c in BBQ_CATEGORIES:
        for r in bbq_category_rows(c):
            idx[(r["context"], r["question"], tuple(sorted((r["ans0"], r["ans1"], r["ans2"]))))] = bbq_key(
                c, r["example_id"]
            )
    return idx


def read_run(run_path: Path, benchmark: str) -> tuple[list[ItemRecord], dict]:
    spec = json.loads((run_path / "run_spec.json").read_text())
    state = json.loads((run_path / "scenario_state.json").read_text())
    stats = {
        p["instance_id"]: {s["name"]["name"]: s.get("mean") for s in p["stats"] if not s["name"].get("perturbation")}
        for p in json.loads((run_path / "per_instance_stats.json").read_text())
    }
    bidx = _bbq_index() if benchmark == "bbq" else {}
    recs = []
    for st in state["request_states"]:
        inst = st["instance"]
        mapping = st.get("output_mapping") or {}
        letters = sorted(mapping)
        options = [mapping[k] for k in letters]
        correct_texts = {r["output"]["text"] for r in inst["references"] if "correct" in r["tags"]}
        gold = [i for i, o in enumerate(options) if o in correct_texts]
        comp = st["result"]["completions"][0]["text"] if st.get("result") and st["result"]["completions"] else ""
        pred = comp.strip()
        choice = letters.index(pred) if pred in mapping else None
        text = inst["input"]["text"]
        if benchmark == "truthfulqa":
            key = question_key(text)
        else:
            ctx, _, q = text.partition("\nQuestion: ")
            key = bidx.get((ctx, q, tuple(sorted(options))), f"bbq:unmatched:{inst['id']}")
        em = stats.get(inst["id"], {}).get("exact_match")
        recs.append(
            ItemRecord(
                package=PACKAGE,
                benchmark=benchmark,
                key=key,
                native_id=inst["id"],
                options=options,
                gold=gold,
                choice=choice,
                correct=bool(em),
                prompt="",
                output=comp,
                meta={
                    "adapter_prompt": st["request"]["prompt"],
                    "request": {
                        k: st["request"].get(k)
                        for k in (
                            "temperature",
                            "max_tokens",
                            "stop_sequences",
                            "num_completions",
                            "top_p",
                            "echo_prompt",
                        )
                    },
                },
            )
        )
    return recs, spec
