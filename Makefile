# changeflow: `make run` (the demo on the embedded stack) and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# The security checks' tools (make lint): checkov in its own virtualenv (it pins an older boto3), and
# cfn-guard with the AWS Control Tower rules from the npm package that ships both (npm pack, not npm
# install: the package's peer dependency is all of aws-cdk-lib), checked against its pinned hash.
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := 3.3.30
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(CHECKOV_VERSION)
CFNGUARD_PACKAGE := @cdklabs/cdk-validator-cfnguard
CFNGUARD_VERSION := 0.0.62
CFNGUARD_SHA256 := 660c14562d4c79d524d0623d80d494e41797acae9da23ecb10915d7f66ada80c
CFNGUARD_DIR := .tools/cdk-validator-cfnguard
CFNGUARD_TGZ := $(CFNGUARD_DIR)/cdklabs-cdk-validator-cfnguard-$(CFNGUARD_VERSION).tgz
CFNGUARD_STAMP := $(CFNGUARD_DIR)/.installed-$(CFNGUARD_VERSION)
# This machine has Python 3.11; Lambda runs python3.13 (the template's default). Builds here override it.
LOCAL_RUNTIME ?= python$(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

export SAM_CLI_TELEMETRY := 0
export SAM_CLI_DISABLE_VERSION_CHECK := 1
export AWS_DEFAULT_REGION ?= us-east-1

.PHONY: run test test-fast lint build bench cost reliability clean setup

setup: $(STAMP) $(NODE_STAMP) $(CHECKOV_STAMP) $(CFNGUARD_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $@

$(NODE_STAMP): package.json
	npm install --no-audit --no-fund --silent
	touch $@

$(CHECKOV_STAMP):
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check "checkov==$(CHECKOV_VERSION)"
	touch $@

$(CFNGUARD_STAMP):
	rm -rf $(CFNGUARD_DIR)
	mkdir -p $(CFNGUARD_DIR)
	cd $(CFNGUARD_DIR) && npm pack --silent "$(CFNGUARD_PACKAGE)@$(CFNGUARD_VERSION)" >/dev/null
	$(PYTHON) -c 'import hashlib, sys; digest = hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest(); \
		sys.exit(0 if digest == sys.argv[2] else f"{sys.argv[1]}: sha256 {digest}, expected {sys.argv[2]}")' \
		$(CFNGUARD_TGZ) $(CFNGUARD_SHA256)
	tar -xzf $(CFNGUARD_TGZ) -C $(CFNGUARD_DIR)
	touch $@

run: $(STAMP)
	$(BIN)/changeflow demo

# The security checks first (make lint), then every test.
test: lint
	$(BIN)/pytest

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow"

# cfn-lint, sam validate --lint, cfn-lint-serverless, checkov, cfn-guard (Control Tower rules and
# rules/changeflow.guard): see src/changeflow/security.py and the README's Security section.
lint: setup
	$(BIN)/python -m changeflow.security
	npx --no-install asl-validator --json-path statemachines/change.asl.json

build: $(STAMP)
	$(BIN)/sam build --parameter-overrides Runtime=$(LOCAL_RUNTIME)

# Measurements for the README (each prints its table; none is a timed assertion in the tests).
bench: $(STAMP)
	$(BIN)/python benchmarks/embedded_vs_direct.py
	$(BIN)/python benchmarks/scaling.py

cost: $(STAMP)
	$(BIN)/python benchmarks/cost.py

reliability: $(STAMP)
	$(BIN)/python benchmarks/reliability.py --examples 100

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .tools build node_modules .aws-sam .pytest_cache .hypothesis
