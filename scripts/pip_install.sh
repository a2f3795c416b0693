#!/usr/bin/env bash
# `pip install` into the venv whose interpreter is PYTHON, by uv when `uv` is on PATH, else by that venv's pip.
# uv resolves and unpacks the same wheels about ten times faster (the main .venv: 215 s with pip, 20 s with uv, the
# same 233 versions). uv does not read pip's configuration, so what pip is configured with (`pip config list`: pip.conf
# and PIP_* variables: find-links, index URLs, constraints) is handed to it as the matching UV_* variable, unless
# that is already set; pip's rule of taking the best version across every index is uv's unsafe-best-match.
# pip compiles what it installs to bytecode and uv does not by default: without the .pyc files, every process where
# PYTHONDONTWRITEBYTECODE is set (CI's, and many containers') compiled torch, transformers, lm-eval and Inspect anew,
# about 20 s a process (loading SmolLM2: 26.5 s without them, 4.7 s with); the compile costs the install 17 s.
#   Usage: bash scripts/pip_install.sh PYTHON PIP-INSTALL-ARGS...     SAFETYREPRO_INSTALLER=pip: always pip
set -euo pipefail
PY=$1
shift
if [ "${SAFETYREPRO_INSTALLER:-auto}" = pip ] || ! command -v uv >/dev/null 2>&1; then
  exec "$PY" -m pip install "$@"
fi
declare -A conf=()
while IFS= read -r line; do  # lines `global.find-links='/opt/wheels'`; a PIP_* variable (`:env:.`) wins over a file
  key=${line%%=*}
  val=${line#*=}
  val=${val#\'}
  val=${val%\'}
  name=${key##*.}
  if [[ $key == :env:* ]] || [ -z "${conf[$name]:-}" ]; then conf[$name]=$val; fi
done < <("$PY" -m pip config list 2>/dev/null || true)
export UV_FIND_LINKS="${UV_FIND_LINKS:-${conf[find-links]:-}}"
export UV_INDEX_URL="${UV_INDEX_URL:-${conf[index-url]:-}}"
export UV_EXTRA_INDEX_URL="${UV_EXTRA_INDEX_URL:-${conf[extra-index-url]:-}}"
export UV_CONSTRAINT="${UV_CONSTRAINT:-${conf[constraint]:-}}"
export UV_INDEX_STRATEGY="${UV_INDEX_STRATEGY:-unsafe-best-match}"
export UV_COMPILE_BYTECODE="${UV_COMPILE_BYTECODE:-1}"
for v in UV_FIND_LINKS UV_INDEX_URL UV_EXTRA_INDEX_URL UV_CONSTRAINT; do [ -n "${!v}" ] || unset "$v"; done
exec uv pip install --python "$PY" "$@"
