# mountwarden: `make run` (a local control plane, the operator and a demo) and `make test` (the whole suite).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STATE ?= .state/dev-cluster
PYTEST_ARGS ?=
#: Hash-locked dependencies (runtime, test and bench extras, build backend), resolved by `make lock` with uv.
LOCK := requirements/dev.txt
UV_VERSION := 0.13.9

.PHONY: krew node image image-lock help venv lock testbin lab kernel-facts lint crds docs test unit integration run bench chart clean promtool

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

venv: $(STAMP) ## Create the virtual environment from the lock (requirements/dev.txt) with the project editable

lock: ## Re-resolve requirements/*.txt from pyproject.toml (uv, hashes); commit the result
	$(PYTHON) -m venv .state/lock-tools
	.state/lock-tools/bin/pip install --quiet uv==$(UV_VERSION)
	hack/lock.sh .state/lock-tools/bin/uv

testbin: ## Build etcd, the Kubernetes control plane, kwok and helm from source (cached outside the checkout)
	hack/testbin/build.sh >/dev/null

promtool: ## Fetch promtool from Debian's prometheus package, for the chart's alert tests (cached outside the checkout)
	hack/promtool/build.sh >/dev/null

lab: venv ## Build the kernel lab image (Debian kernel + NFS server and client for QEMU; cached outside the checkout)
	hack/lab/build.sh >/dev/null

node: venv lab ## Build what the real node needs: its image (the lab + containerd, runc, CNI) and the kubelet (hack/nodebin)
	hack/lab/build.sh node >/dev/null
	hack/nodebin/build.sh >/dev/null

image: venv ## Build mountwarden's image (OCI archive and its SBOM, from hack/image/debian.lock and the runtime lock; cached)
	hack/image/build.sh >/dev/null

image-lock: venv ## Resolve the image's Debian packages (versions, sha256) into hack/image/debian.lock
	hack/lab/host-deps.sh
	$(BIN)/mountwarden image lock

kernel-facts: venv lab ## Measure the kernel in the lab VM into operator/mountwarden/core/options/kernel_facts.json (25-40 min)
	MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) $(BIN)/mountwarden lab measure --output operator/mountwarden/core/options/kernel_facts.json
	$(BIN)/mountwarden docs --output-dir docs/reference

crds: venv ## Regenerate crds/ from the API models
	$(BIN)/mountwarden crds --output-dir crds

docs: venv ## Regenerate docs/reference/ from the API models and the metric definitions
	$(BIN)/mountwarden docs --output-dir docs/reference

chart: ## Copy the generated CRDs (crds/) into the Helm chart (charts/mountwarden/crds/)
	cp crds/*.yaml charts/mountwarden/crds/

lint: venv ## ruff, the import-layer contracts, tests that cannot fail (hack/weak_tests.py), generated files up to date
	$(BIN)/ruff check operator tests e2e bench hack
	$(BIN)/lint-imports
	$(BIN)/python hack/weak_tests.py tests e2e
	$(BIN)/mountwarden crds --output-dir crds --check
	$(BIN)/mountwarden docs --output-dir docs/reference --check
	@for f in crds/*.yaml; do cmp -s $$f charts/mountwarden/crds/$${f#crds/} || \
		{ echo "charts/mountwarden/crds/$${f#crds/} differs from $$f: run make chart"; exit 1; }; done

# MOUNTWARDEN_TEST_CLUSTER=existing: the cluster in KUBECONFIG; kubectl and helm from PATH (the control plane
# is built only when they are missing there, or for the tests that need it). The kernel tests need the lab
# either way: no cluster has a kernel to spare for them.
ifeq ($(MOUNTWARDEN_TEST_CLUSTER),existing)
TEST_NEEDS := venv lab image lint
TEST_ENV = MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) MOUNTWARDEN_IMAGE_DIR=$$(hack/image/build.sh) \
	MOUNTWARDEN_PROMTOOL_DIR=$$(hack/promtool/build.sh)
else
TEST_NEEDS := venv testbin lab node image lint
TEST_ENV = MOUNTWARDEN_TESTBIN_DIR=$$(hack/testbin/build.sh) MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) \
	MOUNTWARDEN_NODE_IMAGE_DIR=$$(hack/lab/build.sh node) MOUNTWARDEN_NODEBIN_DIR=$$(hack/nodebin/build.sh) \
	MOUNTWARDEN_IMAGE_DIR=$$(hack/image/build.sh) MOUNTWARDEN_PROMTOOL_DIR=$$(hack/promtool/build.sh)
endif
# Three lanes (conftest.py): the real node's tests, the kernel lab's, and every other module beside them.
TEST_LANES ?= -n 3
# Every run ends with its twenty slowest tests and their time: where the suite's time goes (issue 29).
TEST_REPORT ?= --durations=20
test: $(TEST_NEEDS) ## Lint and run the whole suite: a real control plane (local, or KUBECONFIG's: see README), a real kernel in QEMU
	$(TEST_ENV) $(BIN)/python -m pytest $(TEST_LANES) $(TEST_REPORT) $(PYTEST_ARGS)

unit: venv ## Only the fast unit tests (no control plane), in two processes
	$(BIN)/python -m pytest tests/unit -n 2 $(PYTEST_ARGS)

run: venv testbin node image ## Start a local control plane, the real node with the chart installed on it, and the demo; Ctrl-C stops everything
	MOUNTWARDEN_TESTBIN_DIR=$$(hack/testbin/build.sh) MOUNTWARDEN_NODE_IMAGE_DIR=$$(hack/lab/build.sh node) \
		MOUNTWARDEN_NODEBIN_DIR=$$(hack/nodebin/build.sh) MOUNTWARDEN_IMAGE_DIR=$$(hack/image/build.sh) \
		hack/run-demo.sh $(STATE)

bench: venv testbin lab node image ## Run every benchmark once; figures in bench/results/ (summary.md, summary.json)
	MOUNTWARDEN_TESTBIN_DIR=$$(hack/testbin/build.sh) MOUNTWARDEN_LAB_DIR=$$(hack/lab/build.sh) \
		MOUNTWARDEN_NODE_IMAGE_DIR=$$(hack/lab/build.sh node) MOUNTWARDEN_NODEBIN_DIR=$$(hack/nodebin/build.sh) \
		MOUNTWARDEN_IMAGE_DIR=$$(hack/image/build.sh) \
		$(BIN)/python bench/run.py $(BENCH_ARGS)

krew: venv ## Build the krew archive of `kubectl mountwarden` into dist/krew/ (reproducible; its sha256 is in plugins/krew/mountwarden.yaml)
	$(BIN)/python hack/krew/archive.py dist/krew/kubectl-mountwarden.tar.gz

clean: ## Remove the virtual environment and local state (not the testbin cache)
	-$(BIN)/mountwarden dev-cluster down --state-dir $(STATE) --purge 2>/dev/null
	rm -rf $(VENV) .state .pytest_cache .ruff_cache .hypothesis
