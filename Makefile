# The two commands of the Quick start: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/toolbridge demo

test: $(STAMP)
	$(BIN)/python -m pytest -q
	$(BIN)/ruff check bridge tests examples bench manifests
	$(BIN)/ruff format --check bridge tests examples bench manifests
	$(BIN)/mypy --strict bridge

lint: $(STAMP)
	$(BIN)/ruff check bridge tests examples bench manifests
	$(BIN)/ruff format --check bridge tests examples bench manifests
	$(BIN)/mypy --strict bridge

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .venv-conformance .mypy_cache .pytest_cache .ruff_cache
