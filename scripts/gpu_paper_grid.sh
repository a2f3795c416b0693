#!/usr/bin/env bash
# The paper's grid on one CUDA GPU through the field's engines: three 7-9B instruct models, the full
# envelope in NF4 through lm-eval's `hf` model (bitsandbytes 4-bit checkpoints, the headline: 612
# cells), the conservative core in bf16 through lm-eval's `vllm` model (the paired precision study),
# the TruthfulQA 80 % subsamples, then the analysis. Nothing in CI runs this.
#
#   OUT=runs/paper scripts/gpu_paper_grid.sh
#
# Needs on the GPU machine: a CUDA build of torch, `pip install -e ".[harness,dev]" "lm-eval[vllm]" bitsandbytes`
# (vLLM brings its own torch: install it first, then SafetyRepro with --no-deps if pip wants to move it),
# and the hub (or local copies: set the variables below to folders). Override any model:
#   BF16_QWEN=/models/Qwen2.5-7B-Instruct NF4_QWEN=/models/Qwen2.5-7B-Instruct-bnb-4bit ...
# NF4 checkpoints are the pre-quantised bitsandbytes ones (their config.json carries the 4-bit
# quantization_config, so lm-eval's HFLM loads them as they are, on any transformers version).
# The grids' `model` column is the label, so the NF4 and bf16 grids pair up in `safetyrepro compare`.
# Several GPUs: add `--executor ray --address auto --workers N` to each sweep (one model per worker).
set -euo pipefail
OUT=${OUT:-runs/paper}
BATCH=${BATCH:-16}
BF16_QWEN=${BF16_QWEN:-Qwen/Qwen2.5-7B-Instruct}
BF16_MISTRAL=${BF16_MISTRAL:-mistralai/Mistral-7B-Instruct-v0.3}
BF16_YI=${BF16_YI:-01-ai/Yi-1.5-9B-Chat}
NF4_QWEN=${NF4_QWEN:-unsloth/Qwen2.5-7B-Instruct-bnb-4bit}
NF4_MISTRAL=${NF4_MISTRAL:-unsloth/mistral-7b-instruct-v0.3-bnb-4bit}
NF4_YI=${NF4_YI:-$BF16_YI}  # no public 4-bit Yi checkpoint: quantised on load by the engine below
VLLM_ARGS=${VLLM_ARGS:-dtype=bfloat16,gpu_memory_utilization=0.85,max_model_len=4096}
unset HF_HUB_OFFLINE  # the hub ids above are downloaded once into the HF cache
mkdir -p "$OUT"

python - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("no CUDA device: install a CUDA build of torch on a GPU machine")
print("cuda:", torch.cuda.get_device_name(0))
PY

cat > "$OUT/models_nf4.yaml" <<EOF
models:
  - {label: Qwen2.5-7B-Instruct, spec: "lm-eval:hf", model_args: "pretrained=$NF4_QWEN,dtype=bfloat16", precision: nf4}
  - {label: Mistral-7B-Instruct-v0.3, spec: "lm-eval:hf", model_args: "pretrained=$NF4_MISTRAL,dtype=bfloat16", precision: nf4}
  - {label: Yi-1.5-9B-Chat, spec: "$NF4_YI", precision: nf4}
EOF
cat > "$OUT/models_bf16.yaml" <<EOF
models:
  - {label: Qwen2.5-7B-Instruct, spec: "lm-eval:vllm", model_args: "pretrained=$BF16_QWEN,$VLLM_ARGS", precision: bf16}
  - {label: Mistral-7B-Instruct-v0.3, spec: "lm-eval:vllm", model_args: "pretrained=$BF16_MISTRAL,$VLLM_ARGS", precision: bf16}
  - {label: Yi-1.5-9B-Chat, spec: "lm-eval:vllm", model_args: "pretrained=$BF16_YI,$VLLM_ARGS", precision: bf16}
EOF

# NF4, full envelope: 3 models x 204 configurations = 612 cells (sampled cells 5 seeds each).
# Yi has no 4-bit checkpoint: SafetyRepro's engine quantises it to NF4 with bitsandbytes on load.
safetyrepro sweep --models-file "$OUT/models_nf4.yaml" --precision nf4 --device cuda \
    --batch-size "$BATCH" --tier full --out "$OUT/nf4"
# bf16 on the conservative core (T1, T3 x greedy x 0-shot x both scorings) through vLLM: 54 paired cells.
safetyrepro sweep --models-file "$OUT/models_bf16.yaml" --precision bf16 --device cuda --batch-size "$BATCH" \
    --tier conservative_core --out "$OUT/bf16"

safetyrepro analyze "$OUT/nf4/grid.csv" --out "$OUT/nf4/analysis"
safetyrepro compare "$OUT/nf4/grid.csv" "$OUT/bf16/grid.csv" --out "$OUT/compare"
# The item-subset robustness check (App. X): three stratified 80 % subsamples of TruthfulQA.
for s in 43 44 45; do
  safetyrepro sweep --models-file "$OUT/models_bf16.yaml" --precision bf16 --device cuda --batch-size "$BATCH" \
      --benchmarks truthfulqa --tier conservative_core --subsample 0.8 --subset-seed $s --out "$OUT/sub$s"
done
safetyrepro compare "$OUT"/sub43/grid.csv "$OUT"/sub44/grid.csv "$OUT"/sub45/grid.csv --out "$OUT/subsamples"
echo "done: $OUT/nf4/analysis/report.md, $OUT/compare, $OUT/subsamples"
