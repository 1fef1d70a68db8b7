# Two commands for a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.voxledger-installed

.PHONY: install demo test bench lint clean-demo

install: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[test]'
	$(BIN)/python -m voxledger.postinstall
	touch $(STAMP)

demo: install
	$(BIN)/voxledger demo run

# two workers by default (CI has two cores); TEST_WORKERS=0 runs everything in one process
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -m "not slow" --durations=25 -n $(TEST_WORKERS) --dist loadgroup

bench: install
	$(BIN)/voxledger bench

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p voxledger
