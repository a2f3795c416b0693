#!/usr/bin/env bash
# The first SafetyRepro study, from scratch, in one command (study/README.md says what it is).
#
#   scripts/study/reproduce.sh                         # the published study: 24 items, into runs/study
#   scripts/study/reproduce.sh --limit 4 --out /tmp/s  # the same steps on 4 items (a quick check)
#   scripts/study/reproduce.sh --publish               # then copy the outputs into study/
#   scripts/study/reproduce.sh --status                # cells done and left, measured time left (step 1)
#   scripts/study/reproduce.sh --save                  # finished cells -> study/cells, steps/<name>/cells (to commit)
#
# Steps, each resumable (rerun the same command after any interruption; finished cells are kept, and the
# cells saved by --save, step 1's under study/cells and steps 3-4's under study/steps/<name>/, are
# restored first, so a new machine goes on where the last one stopped; scripts/study/progress.py says which are
# reused):
#   1. the full envelope (48 configurations per benchmark, 12 for CrowS-Pairs, sampled cells with the 5 seeds
#      of the rules file) on all five benchmarks for SmolLM2-135M, Gemma 3 270M and Qwen2.5-Coder-0.5B,
#      through SafetyRepro's engine in fp32 (exact, and on AVX2-only CPUs faster than bf16);
#   2. `safetyrepro analyze` of that grid (report, figures, GRID card, significance after correction);
#   3. BF16 vs NF4 on a slice (conservative core of TruthfulQA and ToxiGen), `safetyrepro compare`;
#   4. three 80 % item subsamples of TruthfulQA (conservative core), `safetyrepro compare`.
# Extra options are passed to every sweep (e.g. --models smollm2 gemma3-270m --benchmarks xstest toxigen).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT=24
OUT=runs/study
PUBLISH=0
ACTION=run
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) LIMIT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --publish) PUBLISH=1; shift ;;
    --status) ACTION=status; shift ;;
    --save) ACTION=save; shift ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
SR=${SAFETYREPRO:-.venv/bin/safetyrepro}
PY=${PYTHON:-$(dirname "$SR")/python}
MODELS=(smollm2 gemma3-270m qwen2.5-coder-0.5b)
has() { for a in "${EXTRA[@]+"${EXTRA[@]}"}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
MODEL_ARGS=(--models "${MODELS[@]}"); has --models && MODEL_ARGS=()
STEP1=("${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"}" --tier full --precision fp32 --limit "$LIMIT" --no-progress
       "${EXTRA[@]+"${EXTRA[@]}"}")
SLICE=(--benchmarks truthfulqa toxigen --tier conservative_core --limit "$LIMIT" --no-progress)
has --benchmarks && SLICE=(--tier conservative_core --limit "$LIMIT" --no-progress)
SUB=(--benchmarks truthfulqa --tier conservative_core --limit "$LIMIT" --no-progress)
has --benchmarks && SUB=(--tier conservative_core --limit "$LIMIT" --no-progress)
STEPS=(precision-bf16 precision-nf4 sub43 sub44 sub45)  # steps 3 and 4: one sweep each, saved under steps/<name>
step_args() {  # step_args NAME: the sweep arguments of that step, into ARGS
  case "$1" in
    precision-*) ARGS=("${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"}" --precision "${1#precision-}" "${SLICE[@]}") ;;
    sub*) ARGS=("${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"}" --precision fp32 --subsample 0.8 --subset-seed "${1#sub}"
                "${SUB[@]}") ;;
  esac
  ARGS+=("${EXTRA[@]+"${EXTRA[@]}"}")
}
SAVED=${STUDY_SAVED:-study}  # where --save keeps finished cells (the repository; a test points it elsewhere)
progress() { "$PY" scripts/study/progress.py "$@"; }
if [ "$ACTION" = status ]; then
  exec "$PY" scripts/study/progress.py status --run "$OUT/grid" --dest "$SAVED" -- "${STEP1[@]}"
fi
if [ "$ACTION" = save ]; then
  progress save --run "$OUT/grid" --dest "$SAVED" -- "${STEP1[@]}"
  for s in "${STEPS[@]}"; do
    [ -f "$OUT/$s/sweep.json" ] || continue
    step_args "$s"
    echo "step $s:"
    progress save --run "$OUT/$s" --dest "$SAVED/steps/$s" -- "${ARGS[@]}"
  done
  exit 0
fi
mkdir -p "$OUT"
start=$(date +%s)

sweep_resuming() {  # sweep_resuming DIR SAVED ARGS...: restore the saved cells of DIR, then sweep into it
  local dir=$1 saved=$2 attempt rc
  shift 2
  progress restore --run "$dir" --dest "$saved" -- "$@"
  # A long sweep killed from outside (out of memory, a machine stop) resumes from its finished cells; an
  # input error (exit 2) is not retried.
  for attempt in 1 2 3 4 5 6; do
    rc=0
    "$SR" sweep "$@" --out "$dir" || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 2 ] && exit 2
    echo "study: the sweep ended with exit $rc (attempt $attempt of 6); finished cells are kept, resuming"
    [ "$attempt" = 6 ] && exit "$rc"
  done
}

echo "study: 1/4 full envelope, fp32, $LIMIT items per benchmark -> $OUT/grid"
progress status --run "$OUT/grid" --dest "$SAVED" -- "${STEP1[@]}" | sed -n 3p
sweep_resuming "$OUT/grid" "$SAVED" "${STEP1[@]}"
echo "study: 2/4 analysis -> $OUT/analysis"
"$SR" analyze "$OUT/grid/grid.csv" --out "$OUT/analysis"

echo "study: 3/4 BF16 vs NF4 on the conservative core of TruthfulQA and ToxiGen -> $OUT/precision"
for p in bf16 nf4; do
  step_args "precision-$p"
  sweep_resuming "$OUT/precision-$p" "$SAVED/steps/precision-$p" "${ARGS[@]}"
done
"$SR" compare "$OUT/precision-bf16/grid.csv" "$OUT/precision-nf4/grid.csv" --out "$OUT/precision"

echo "study: 4/4 three 80 % item subsamples of TruthfulQA (conservative core) -> $OUT/subsamples"
for s in 43 44 45; do
  step_args "sub$s"
  sweep_resuming "$OUT/sub$s" "$SAVED/steps/sub$s" "${ARGS[@]}"
done
"$SR" compare "$OUT"/sub43/grid.csv "$OUT"/sub44/grid.csv "$OUT"/sub45/grid.csv --labels sub43 sub44 sub45 \
    --out "$OUT/subsamples"
echo "study: done in $(( $(date +%s) - start )) s wall: $OUT/analysis/report.md"

if [ "$PUBLISH" = 1 ]; then
  D=${STUDY_PUBLISH:-study}  # the repository's study; a test publishes elsewhere
  mkdir -p "$D"
  cp "$OUT"/grid/{grid.csv,grid.parquet,run.json} "$D"/
  "$PY" - "$OUT/grid/items.parquet" "$D/items.parquet" <<'PY'
import sys, pandas as pd
pd.read_parquet(sys.argv[1]).to_parquet(sys.argv[2], index=False, compression="zstd", compression_level=19)
PY
  rm -rf "$D/analysis" "$D/precision" "$D/subsamples"
  cp -r "$OUT/analysis" "$OUT/precision" "$OUT/subsamples" "$D"/
  "$PY" scripts/study/paper_comparison.py "$OUT/analysis" --precision "$OUT/precision" --subsamples "$OUT/subsamples" \
      --out "$D/paper_comparison.md"
  echo "published into $D (items.parquet: $(du -h "$D/items.parquet" | cut -f1))"
fi
