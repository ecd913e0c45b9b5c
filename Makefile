# From a fresh clone: `make demo` or `make test` does all the set-up.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-all lint demo data benchmarks clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .

test: install lint
	$(BIN)/pytest -q

test-all: install
	$(BIN)/pytest -q -m ""

clean:
	rm -rf $(VENV) outputs lightning_logs .pytest_cache .ruff_cache
