# Two set-up-free entry points: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint types docs unit chaos mutate install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The library (editable), the development set (the PEP 735 group `dev` of pyproject.toml,
# which is not a published extra; `pip install --group` needs pip 25.1) and the benchmark
# (bench/, the package soloist_bench behind `soloist bench`), installed from the clone beside
# the library; it is not part of soloist's wheel. pip picks the newest release each range allows.
$(STAMP): $(BIN)/python pyproject.toml bench/pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	$(BIN)/python -m pip install --quiet --upgrade -e . --group dev -e ./bench
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/soloist demo

lint: $(STAMP)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench

types: $(STAMP)
	$(BIN)/mypy

# The docs site, with every warning an error (a broken link or a stale reference fails).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir .site

# The unit, conformance and integration tiers run on 3 workers (each test isolates its data:
# a schema, a key prefix, a file of its own; most of their time is spent waiting on servers);
# the acceptance, chaos and browser tiers, which time failovers and faults, run one at a time.
FAST_TIERS := tests/unit tests/conformance tests/integration
SERIAL_TIERS := tests/acceptance tests/chaos tests/browser

test: lint types docs
	$(BIN)/python -m pytest -q -n 3 $(FAST_TIERS)
	$(BIN)/python -m pytest -q $(SERIAL_TIERS)

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# The chaos suite's long form: every fault on every store where it applies, with more work
# each, and the figures of lost and doubled work at the end (make test runs a quick subset).
chaos: $(STAMP)
	SOLOIST_CHAOS=long $(BIN)/python -m pytest -q -m chaos tests/chaos

# Mutation testing of the modules that hold the guarantees (docs/contributing.md): mutmut
# mutates their functions one change at a time and runs the fast tests that reach each. Not
# part of make test. MUTATE picks groups of tests/mutation/groups.toml (all by default),
# MUTATE_MINUTES the time budget; the survivors are compared with docs/contributing/mutants.md.
MUTATE ?=
MUTATE_MINUTES ?= 90

mutate: $(STAMP)
	$(BIN)/python tests/mutation/run.py --minutes $(MUTATE_MINUTES) $(MUTATE)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .site mutants
