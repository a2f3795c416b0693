#!/usr/bin/env bash
# The paper's grid on one CUDA GPU: three 7-9B instruct models, the full envelope in NF4 (the
# headline, 612 cells), the conservative core in bf16 (the paired precision study), then the analysis.
# Needs: a CUDA torch build, bitsandbytes with CUDA, and access to the Hugging Face hub (or local
# copies of the three models: pass their folders in MODELS). Nothing in CI runs this.
#
#   MODELS="Qwen/Qwen2.5-7B-Instruct mistralai/Mistral-7B-Instruct-v0.3 01-ai/Yi-1.5-9B-Chat" \
#   OUT=runs/paper scripts/gpu_paper_grid.sh
#
# On a 24 GB card bf16 of the 9B model does not fit; run the bf16 step on >= 40 GB or drop Yi there.
# Several GPUs or machines: add `--executor ray --address auto --workers N` (one model per worker).
set -euo pipefail
MODELS=${MODELS:-"Qwen/Qwen2.5-7B-Instruct mistralai/Mistral-7B-Instruct-v0.3 01-ai/Yi-1.5-9B-Chat"}
OUT=${OUT:-runs/paper}
DEVICE=${DEVICE:-cuda}
BATCH=${BATCH:-16}
unset HF_HUB_OFFLINE  # the hub ids above are downloaded once into the HF cache

python - <<'PY'
import torch, sys
if not torch.cuda.is_available():
    sys.exit("no CUDA device: install a CUDA build of torch (pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128) on a GPU machine")
print("cuda:", torch.cuda.get_device_name(0))
PY
python -c "import bitsandbytes" 2>/dev/null || pip install "bitsandbytes>=0.45"

# NF4, full envelope: 3 models x 204 configurations = 612 cells (sampled cells 5 seeds each).
safetyrepro sweep --models $MODELS --precision nf4 --device "$DEVICE" --batch-size "$BATCH" \
    --tier full --out "$OUT/nf4"
# bf16 on the conservative core (T1, T3 x greedy x 0-shot x both scorings): 54 paired cells.
safetyrepro sweep --models $MODELS --precision bf16 --device "$DEVICE" --batch-size "$BATCH" \
    --tier conservative_core --out "$OUT/bf16"

safetyrepro analyze "$OUT/nf4/grid.csv" --out "$OUT/nf4/analysis"
safetyrepro compare "$OUT/nf4/grid.csv" "$OUT/bf16/grid.csv" --out "$OUT/compare"
# The item-subset robustness check (App. X): three stratified 80 % subsamples of TruthfulQA.
for s in 43 44 45; do
  safetyrepro sweep --models $MODELS --precision nf4 --device "$DEVICE" --batch-size "$BATCH" \
      --benchmarks truthfulqa --tier conservative_core --subsample 0.8 --subset-seed $s --out "$OUT/sub$s"
done
safetyrepro compare "$OUT"/sub43/grid.csv "$OUT"/sub44/grid.csv "$OUT"/sub45/grid.csv --out "$OUT/subsamples"
echo "done: $OUT/nf4/analysis/report.md, $OUT/compare, $OUT/subsamples"
