# Two commands do all set-up on a fresh machine:
#   make demo   - creates .venv, installs everything, runs the offline demo
#   make test   - creates .venv, installs everything, runs lint, type checks and the tests
# torch==2.13.0 is installed first, on its own: it is the CPU wheel (any other spec pulls CUDA).
# --no-compile: pip would byte-compile every module of every package (torch, transformers, ...);
# Python compiles the ones actually imported on first use instead (here: 2m38s -> 59s of install).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint test-fast test-full bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile torch==2.13.0
	$(BIN)/python -m pip install --quiet --no-compile -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p .demo
	$(BIN)/reflective demo --fresh --db .demo/reflective-demo.db

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The suite runs on TEST_WORKERS pytest-xdist workers; each expensive session server (Postgres,
# llama.cpp) keeps its tests on one worker (tests/conftest.py). TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 2

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit -m "not integration and not slow"

test-full: $(STAMP)
	$(BIN)/python -m pytest -m "slow or not slow"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
