# Every target creates .venv and installs what it needs on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: install kernel test test-fast faults lint typecheck demo bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(MAKE) --no-print-directory kernel
	touch $(STAMP)

install: $(STAMP)

# The notebook kernel lives in this checkout's .venv (share/jupyter/kernels), never per user:
# another clone's kernel cannot run this one's notebooks, and .venv/bin/jupyter finds it.
kernel:
	$(BIN)/python -m ipykernel install --sys-prefix --name delta-barrier --display-name "Delta Barrier" >/dev/null

# Test files run in TEST_WORKERS processes (pytest-xdist), each file whole in one of them
# (its module fixtures set up once); most tests wait on child processes and services.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"

# The fault campaign (tests/faults): CI runs its fixed seed set; SEEDS=N runs seeds 0..N-1
# (or SEEDS=a-b, SEEDS=a,b,c), each on the warehouse its seed draws (a local directory, or
# about one seed in four an S3 prefix on the test S3 server with a PostgreSQL catalog);
# STORE=s3, STORE=local or STORE=both forces it. The summary and every failure's seed,
# store and schedule are printed.
faults: $(STAMP)
	DELTA_BARRIER_FAULT_SEEDS=$(SEEDS) DELTA_BARRIER_FAULT_STORE=$(STORE) \
		$(BIN)/python -m pytest -q -m faults tests/faults

lint: $(STAMP)
	$(BIN)/ruff check catalog consistency etl tests bench examples
	$(BIN)/ruff format --check catalog consistency etl tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/python -m examples.shop.demo --warehouse demo-warehouse

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
