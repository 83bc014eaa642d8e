# mountwarden: `make run` (a local control plane, the operator and a demo) and `make test` (the whole suite).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STATE ?= .state/dev-cluster
PYTEST_ARGS ?=

.PHONY: help venv testbin lab kernel-facts lint crds docs test unit integration run bench chart clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

venv: $(STAMP) ## Create the virtual environment with the project and its test extras

testbin: ## Build etcd, the Kubernetes control plane, kwok and helm from source (cached outside the checkout)
	hack/testbin/build.sh >/dev/null

lab: venv ## Build the kernel lab image (Debian kernel + NFS server and client for QEMU; cached outside the checkout)
	hack/lab/build.sh >/dev/null

kernel-facts: venv lab ## Measure the kernel in the lab VM into operator/mountwarden/core/kernel_facts.json (15-20 min)
	MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) $(BIN)/mountwarden lab measure --output operator/mountwarden/core/kernel_facts.json

crds: venv ## Regenerate crds/ from the API models
	$(BIN)/mountwarden crds --output-dir crds

docs: venv ## Regenerate docs/reference/ from the API models and the metric definitions
	$(BIN)/mountwarden docs --output-dir docs/reference

chart: ## Copy the generated CRDs (crds/) into the Helm chart (charts/mountwarden/crds/)
	cp crds/*.yaml charts/mountwarden/crds/

lint: venv ## ruff, the import-layer contracts, and generated files up to date
	$(BIN)/ruff check operator tests e2e bench
	$(BIN)/lint-imports
	$(BIN)/mountwarden crds --output-dir crds --check
	$(BIN)/mountwarden docs --output-dir docs/reference --check

test: venv testbin lab lint ## Lint and run the whole suite: a real local control plane, a real kernel in QEMU
	MOUNTWARDEN_TESTBIN_DIR=$$(hack/testbin/build.sh) MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) \
		$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: venv ## Only the fast unit tests (no control plane)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

run: venv testbin ## Start a local control plane, the operator and the demo; Ctrl-C stops everything
	MOUNTWARDEN_TESTBIN_DIR=$$(hack/testbin/build.sh) hack/run-demo.sh $(STATE)

bench: venv testbin lab ## Run every benchmark once; figures in bench/results/ (summary.md, summary.json)
	MOUNTWARDEN_TESTBIN_DIR=$$(hack/testbin/build.sh) MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) \
		$(BIN)/python bench/run.py $(BENCH_ARGS)

clean: ## Remove the virtual environment and local state (not the testbin cache)
	-$(BIN)/mountwarden dev-cluster down --state-dir $(STATE) --purge 2>/dev/null
	rm -rf $(VENV) .state .pytest_cache .ruff_cache .hypothesis
