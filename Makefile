# Two commands set everything up on a fresh machine (Python 3.11+ and the package registries):
#   make demo   - create .venv, install tenure, run `tenure demo` on an embedded PostgreSQL
#   make test   - create .venv with the dev extras, install the test tools, run every suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo tools test test-kind test-fast generate lint model model-deep clean

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

# The kind suite (e2e/kind/run.sh: a real 3-node cluster, chart, scenarios). With
# TENURE_KIND_E2E=auto (the default), `make tools` installs Docker, kind and the images and
# `make test` runs the suite whenever a Docker engine answers; TENURE_KIND_E2E=0 turns it off.
TENURE_KIND_E2E ?= auto
export TENURE_KIND_E2E

test: install tools lint
	. scripts/tools/env.sh && $(BIN)/pytest
	@if [ "$(TENURE_KIND_E2E)" != 0 ]; then $(MAKE) test-kind; \
	else echo "make test: the kind suite is off (TENURE_KIND_E2E=0)"; fi

test-kind: install
	@. scripts/tools/env.sh; \
	if command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; then \
	  bash e2e/kind/run.sh; \
	else \
	  echo "make test-kind: no Docker engine answers: the kind suite is SKIPPED (see e2e/kind/README.md)"; \
	fi

test-fast: install
	$(BIN)/pytest tests/unit tests/integration

model:
	bash docs/model/check.sh

model-deep:
	bash docs/model/check.sh --deep

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache
