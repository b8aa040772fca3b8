# Two commands: `make run` (set up, then serve on embedded defaults) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
CHECKOV := .venv-checkov/bin/checkov

.PHONY: setup bwrap run test lint test-embedded test-pg15 bench bench-quick bench-tools clean

$(STAMP): pyproject.toml
	@echo "svc: creating $(VENV) and installing the dependencies (first time: about a minute)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# checkov pins its own dependency tree, so it gets an environment of its own.
$(CHECKOV):
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install --quiet 'checkov==3.3.30'

# The local driver runs backends under bubblewrap: installed here when missing (as root).
bwrap:
	@bash scripts/ensure-bwrap.sh

setup: $(STAMP) bwrap

run: $(STAMP) bwrap
	@echo "svc: starting the service (embedded Postgres in .svc/, migrations, then the API)"
	$(BIN)/svc serve

test: lint test-embedded test-pg15

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test-embedded: $(STAMP) $(CHECKOV) bwrap
	$(BIN)/pytest -q

test-pg15: $(STAMP) $(CHECKOV) bwrap
	bash scripts/with-pg15.sh $(BIN)/pytest -q

# The peers (Procrastinate, PgQueuer) come from the `bench` extra; wrk from Debian.
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-tools: $(BENCH_STAMP)
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq >/dev/null \
		&& apt-get install -y -qq wrk >/dev/null; } || { echo "make bench needs wrk" >&2; exit 1; }

bench: bench-tools
	$(BIN)/python -m tests.benchmarks.run

# Shorter runs and smaller data (about a third of the time); same figures.
bench-quick: bench-tools
	$(BIN)/python -m tests.benchmarks.run --quick

clean:
	rm -rf $(VENV) .venv-checkov .svc .pytest_cache .mypy_cache .ruff_cache .hypothesis
