# The two commands of the README's quick start: `make serve` and `make test`; `make test-fast`
# is the edit loop's tier (tests/tiers.py says which tests are in it).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: serve test test-fast bench lint

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

serve: $(VENV)/.installed
	$(BIN)/ldims serve

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/lint-imports

test: lint
	bash tests/system_packages.sh
	bash tests/mcp_clients/install.sh
	$(BIN)/pytest

# In-process tests only: no worker, server or database process, about two minutes.
test-fast: lint
	$(BIN)/pytest -q -m "not system and not slow" --durations=10

bench: $(VENV)/.installed
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/extract.py
