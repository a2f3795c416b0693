#!/usr/bin/env bash
# The certified study (study/certified/README.md): the three embedded models on the 300-item subsets of
# all five benchmarks, the full envelope, certified pairwise verdicts on a wall-time budget per run.
#
#   scripts/study/certified_study.sh                    # one piece: --budget 50m of evaluation, into runs/certified
#   scripts/study/certified_study.sh --budget 8h        # a longer piece (it saves itself every 10 minutes as it goes)
#   scripts/study/certified_study.sh --save             # copy the run's outputs into study/certified (to commit)
#
# Each piece resumes where the last stopped: the committed study/certified/{items.parquet,cost.json} are
# put into the run folder first, and certify takes an earlier run's records of the same command as evaluated
# (docs/certify.md, *Resuming*), so a new machine with an empty outputs cache goes on too. The 24-item
# study's records (study) are the first 24 draws of every configuration (--order subset). Run it from a
# clone of committed main in its own venv, at the lowest priority: nice -n 19 scripts/study/certified_study.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET=50m
OUT=runs/certified
SAVE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --save) SAVE=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
SR=${SAFETYREPRO:-.venv/bin/safetyrepro}
D=${CERTIFIED_SAVED:-study/certified}
FILES=(certificate.csv claims.csv cost.json report.md items.parquet)
if [ "$SAVE" = 1 ]; then
  mkdir -p "$D"
  for f in "${FILES[@]}"; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$D/$f"; done
  "${PYTHON:-.venv/bin/python}" scripts/study/certified_status.py --dir "$D"
  echo "saved ${FILES[*]} into $D"
  exit 0
fi
if [ ! -f "$OUT/cost.json" ] && [ -f "$D/cost.json" ] && [ -f "$D/items.parquet" ]; then
  mkdir -p "$OUT"
  for f in "${FILES[@]}"; do [ -f "$D/$f" ] && cp "$D/$f" "$OUT/$f"; done
fi
exec "$SR" certify live --models smollm2 gemma3-270m qwen2.5-coder-0.5b --tier full --precision fp32 \
    --alpha 0.05 --delta 0.05 --order subset --records study --budget "$BUDGET" --out "$OUT"
