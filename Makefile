# One command for each job a new machine needs (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/agent-health: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# The main job: run the quickstart suite against the bundled example agent.
demo: $(BIN)/agent-health
	cd examples/01-quickstart && ../../$(BIN)/agent-health run

# Everything CI runs: lint, format check, types, layer contracts, the test suite.
test: $(BIN)/agent-health lint
	$(BIN)/pytest

lint: $(BIN)/agent-health
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Engine overhead next to pytest, and concurrency efficiency; prints ratios, never gates.
# Pass options through, e.g. make bench BENCH_ARGS="--n 5000 --rounds 5".
bench: $(BIN)/agent-health
	$(BIN)/python bench/engine_overhead.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .agent-health .mypy_cache .pytest_cache .ruff_cache
