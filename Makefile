# Two commands for a fresh machine: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.voxledger-installed
TEST_STAMP := $(VENV)/.voxledger-test-installed

.PHONY: install install-test demo test bench lint clean-demo

# what the pipeline needs; the demo installs only this (the test extra adds moto, mypy, ruff and
# pytest: 217 s against 170 s in one fresh venv each on a 2-core Xeon). pip does not byte-compile
# (it compiles one file at a time); postinstall compiles site-packages on every core instead:
# 109 s against 133 s for this target, same hour, fresh venvs (docs/timings.md)
install: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e .
	$(BIN)/python -m voxledger.postinstall
	touch $(STAMP)

install-test: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e '.[test]'
	$(BIN)/python -m voxledger.postinstall
	touch $(TEST_STAMP)

demo: install
	$(BIN)/voxledger demo run

# two workers by default (CI has two cores); TEST_WORKERS=0 runs everything in one process
TEST_WORKERS ?= 2
test: install-test
	$(BIN)/python -m pytest -q -m "not slow" --durations=25 -n $(TEST_WORKERS) --dist loadgroup

bench: install-test
	$(BIN)/voxledger bench

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p voxledger
