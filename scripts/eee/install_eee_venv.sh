#!/usr/bin/env bash
# The Every Eval Ever environment next to the project (make eee): every-eval-ever 0.3.0, which needs
# Python >= 3.12 and pulls duckdb and huggingface-hub 1.x, so it never shares the main .venv. HELM's
# converter imports crfm-helm's dataclasses (helm.benchmark.*): crfm-helm goes in --no-deps with the
# few light packages those modules import (no torch).  SafetyRepro itself is not installed here: it
# calls this venv's python in a subprocess (safetyrepro/eee/venv.py).
#   Usage: bash scripts/eee/install_eee_venv.sh [VENV] [PYTHON3.12]
#   VENV       default .venv-eee
#   PYTHON3.12 default $EEE_PYTHON, else pyenv's 3.12.1, else python3.12 on PATH
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${1:-.venv-eee}"
PY="${2:-${EEE_PYTHON:-}}"
if [ -z "$PY" ]; then
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  if [ -x "$root/versions/3.12.1/bin/python" ]; then PY="$root/versions/3.12.1/bin/python"
  else PY="$(command -v python3.12 || true)"; fi
fi
[ -n "$PY" ] || { echo "no Python 3.12 found: install it (pyenv install 3.12.1) or pass EEE_PYTHON=/path/to/python3.12" >&2; exit 2; }
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
P="bash scripts/pip_install.sh $VENV/bin/python"  # uv where it is on PATH, else pip
$P -q --upgrade pip
$P -q -r scripts/eee/requirements.txt
$P -q --no-deps -r scripts/eee/requirements-helm-nodeps.txt
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
from every_eval_ever.validator.validate import validate_file  # noqa: F401  (the validator the tests call)
import every_eval_ever.converters.helm.adapter as helm_adapter
import every_eval_ever.converters.helm.instance_level_adapter as helm_instances
for m in (helm_adapter, helm_instances):  # the converter keeps an import failure to raise it later: ask now
    assert m._HELM_IMPORT_ERROR is None, f"HELM's converter cannot import crfm-helm: {m._HELM_IMPORT_ERROR!r}"
print("eee env:", {d: md.version(d) for d in ("every-eval-ever", "crfm-helm", "pydantic", "jsonschema")})
PY
touch "$VENV/.installed"
echo "eee env ready in $VENV ($(( $(date +%s) - start )) s)"
