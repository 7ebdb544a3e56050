PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check sansmcp tests bench
	$(BIN)/ruff format --check sansmcp tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict sansmcp

unit: $(STAMP)
	$(BIN)/python -X dev -m coverage run -m pytest -W error
	$(BIN)/python -m coverage report --fail-under=95

test: lint typecheck unit

clean:
	rm -rf $(VENV) .coverage .mypy_cache .ruff_cache .hypothesis

demo: $(STAMP)
	$(BIN)/python examples/demo.py
