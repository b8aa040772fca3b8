# Two commands: `make run` (set up, then serve on embedded defaults) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
CHECKOV := .venv-checkov/bin/checkov
# The real Codex CLI the `codex` backend kind's tests run (tests/test_codex_backend.py).
CODEX_VERSION := 0.169.0
CODEX_STAMP := .tools/codex/.installed-$(CODEX_VERSION)
# The TypeScript client generator and compiler of tests/test_openapi_typescript_client.py.
OPENAPI_TS_VERSION := 0.85.0
TYPESCRIPT_VERSION := 5.9.3
OPENAPI_TS_STAMP := .tools/openapi-ts/.installed-$(OPENAPI_TS_VERSION)-$(TYPESCRIPT_VERSION)

# Test processes per pass (pytest-xdist workers); `make test TEST_WORKERS=1` runs one.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -q -n $(TEST_WORKERS)

.PHONY: setup bwrap debs run test test-setup lint test-embedded test-pg15 bench bench-quick \
	bench-tools clean codex

$(STAMP): pyproject.toml
	@echo "svc: creating $(VENV) and installing the dependencies (first time: about a minute)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[dev]'
	$(BIN)/python scripts/compile_cli.py
	touch $(STAMP)

# checkov pins its own dependency tree, so it gets an environment of its own.
# --no-compile (here and above): Python compiles what is imported on first use; compiling
# every installed file up front took half of the install.
# Only the `svc` program's modules are, by scripts/compile_cli.py: under
# PYTHONDONTWRITEBYTECODE=1 nothing is cached on first use (every command compiled again).
$(CHECKOV):
	$(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/pip install --quiet --no-compile 'checkov==3.3.30'

# The local driver runs backends under bubblewrap, on their own network through pasta
# (Debian's passt): installed here when missing (as root).
bwrap:
	@bash scripts/ensure-debs.sh bwrap pasta

# What the tests need from Debian (bubblewrap, passt, postgresql-15): one apt-get update.
debs:
	@bash scripts/ensure-debs.sh bwrap pasta pg15

setup: $(STAMP) bwrap

run: $(STAMP) bwrap
	@echo "svc: starting the service (embedded Postgres in .svc/, migrations, then the API)"
	$(BIN)/svc serve

# Install everything at once (venv, checkov's venv, Debian packages), then lint and test one
# step at a time: every test on the embedded PostgreSQL 18 (the `serial` ones alone after
# the others), then the `pg_versions` ones (SQL, migrations, ledger, projections, replay,
# roles, locks: see tests/conftest.py) again on PostgreSQL 15.
test: test-setup
	@$(MAKE) --no-print-directory lint test-embedded test-pg15

test-setup:
	@$(MAKE) --no-print-directory -j3 $(STAMP) $(CHECKOV) debs
	@$(MAKE) --no-print-directory codex
	@$(MAKE) --no-print-directory openapi-ts

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test-embedded: $(STAMP) $(CHECKOV) bwrap $(CODEX_STAMP)
	$(PYTEST) --durations=25 -m 'not serial'
	$(BIN)/pytest -q -m serial

test-pg15: $(STAMP) bwrap $(CODEX_STAMP)
	bash scripts/with-pg15.sh $(PYTEST) -m pg_versions

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

# Codex CLI at the pinned version from npm, in the project (Debian's nodejs and npm first when
# node is missing); installed once per version.
$(CODEX_STAMP):
	@bash scripts/ensure-debs.sh node
	rm -rf .tools/codex
	npm install --prefix .tools/codex --no-audit --no-fund --no-save \
		'@openai/codex@$(CODEX_VERSION)'
	touch $(CODEX_STAMP)

codex: $(CODEX_STAMP)

# @hey-api/openapi-ts and typescript at pinned versions from npm, in the project.
$(OPENAPI_TS_STAMP):
	@bash scripts/ensure-debs.sh node
	rm -rf .tools/openapi-ts
	npm install --prefix .tools/openapi-ts --no-audit --no-fund --no-save \
		'@hey-api/openapi-ts@$(OPENAPI_TS_VERSION)' 'typescript@$(TYPESCRIPT_VERSION)'
	touch $(OPENAPI_TS_STAMP)

.PHONY: openapi-ts
openapi-ts: $(OPENAPI_TS_STAMP)

clean:
	rm -rf $(VENV) .venv-checkov .tools .svc .pytest_cache .mypy_cache .ruff_cache .hypothesis
