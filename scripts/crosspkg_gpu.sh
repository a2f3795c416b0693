#!/usr/bin/env bash
# The paper's real anchor on a CUDA GPU: Qwen2.5-7B-Instruct, bf16, greedy, max_new_tokens 96, 0-shot,
# 300 items, seed 42, through lm-eval, HELM and Inspect, then the decomposition.
#
#   bash scripts/crosspkg_gpu.sh [MODEL_DIR] [OUT]
#
# MODEL_DIR: a local Hugging Face folder of Qwen/Qwen2.5-7B-Instruct (config.json, *.safetensors,
#            tokenizer with its chat template). Without one, the script downloads it into
#            $HF_HOME with `huggingface-cli download` (needs hub access).
# Needs: one CUDA GPU with >= 24 GB (bf16 weights 15.2 GB + activations; an H100/H200/A100 is ample),
#        Python 3.10+, the benchmark mirror ($SAFETYREPRO_DATA_DIR, laid out like shared/data).
# Takes (H100-class, 300 items x 3 benchmarks): lm-eval ~5 min, HELM ~15 min (unbatched, 96 tokens),
# Inspect ~5 min x 2 variants, decomposition ~20 min; the model loads once per package.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR="${1:-}"
OUT="${2:-runs/crosspkg-qwen2.5-7b}"
: "${SAFETYREPRO_DATA_DIR:?set SAFETYREPRO_DATA_DIR to the benchmark mirror (laid out like shared/data)}"
# CUDA wheel of the same torch version as the CPU one the project pins
TORCH_CUDA="${TORCH_CUDA:-torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128}"
PY="${PYTHON:-python3}"

# 1. the project (lm-eval, Inspect, the engine) and HELM, each in its venv, both on the CUDA torch
if [ ! -f .venv/.installed ]; then
  make install TORCH="$TORCH_CUDA" PYTHON="$PY"
fi
if [ ! -f .venv-helm/.installed ]; then
  make helm TORCH="$TORCH_CUDA" PYTHON="$PY"
fi
.venv/bin/python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device visible to torch'; print(torch.cuda.get_device_name(0))"

# 2. the model folder
if [ -z "$MODEL_DIR" ]; then
  MODEL_DIR="${HF_HOME:-$HOME/.cache/huggingface}/qwen2.5-7b-instruct"
  if [ ! -f "$MODEL_DIR/config.json" ]; then
    .venv/bin/python -m pip install -q "huggingface_hub[cli]"
    HF_HUB_OFFLINE=0 .venv/bin/huggingface-cli download Qwen/Qwen2.5-7B-Instruct --local-dir "$MODEL_DIR"
  fi
fi
test -f "$MODEL_DIR/config.json" || { echo "not a HF model folder: $MODEL_DIR" >&2; exit 2; }

# 3. the study: the paper's anchor (300 items, seed 42, bf16, greedy, 96 new tokens, 0-shot)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/safetyrepro crosspkg --model "$MODEL_DIR" --device cuda --precision bf16 \
    --benchmarks truthfulqa bbq toxigen --limit 300 --seed 42 --max-new-tokens 96 --batch-size 16 --out "$OUT"
echo "report: $OUT/report.md"
