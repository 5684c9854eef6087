# changeflow: `make run` (the demo on the embedded stack) and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# This machine has Python 3.11; Lambda runs python3.13 (the template's default). Builds here override it.
LOCAL_RUNTIME ?= python$(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

export SAM_CLI_TELEMETRY := 0
export SAM_CLI_DISABLE_VERSION_CHECK := 1
export AWS_DEFAULT_REGION ?= us-east-1

.PHONY: run test test-fast lint build bench clean setup

setup: $(STAMP) $(NODE_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $@

$(NODE_STAMP): package.json
	npm install --no-audit --no-fund --silent
	touch $@

run: $(STAMP)
	$(BIN)/changeflow demo

test: $(STAMP) $(NODE_STAMP)
	$(BIN)/pytest

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow"

lint: $(STAMP) $(NODE_STAMP)
	$(BIN)/cfn-lint template.yaml
	$(BIN)/sam validate --lint
	npx --no-install asl-validator --json-path statemachines/change.asl.json

build: $(STAMP)
	$(BIN)/sam build --parameter-overrides Runtime=$(LOCAL_RUNTIME)

bench: $(STAMP)
	$(BIN)/python benchmarks/embedded_vs_direct.py

clean:
	rm -rf $(VENV) node_modules .aws-sam .pytest_cache .hypothesis
