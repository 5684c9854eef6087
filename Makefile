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
# The console's browser tests (tests/test_console.py) drive Debian's chromium through Playwright; the
# package is installed once (the rule is skipped when the file exists). Never `playwright install`.
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# The Lambda runtime without Docker (changeflow local invoke, --lambda-runtime emulator): a venv on Lambda's
# python3.13 (pyenv's newest 3.13.x, else python3.13 on PATH, else $(PYTHON)) with the runtime interface
# client, boto3 (which the Lambda runtime provides) and, in opt/python, the layer's requirements installed
# as sam build installs them (--no-deps). The emulator itself ships inside aws-sam-cli.
LAMBDA_VENV := .venv-lambda
LAMBDA_STAMP := $(LAMBDA_VENV)/.installed
AWSLAMBDARIC_VERSION := 4.2.2
LAMBDA_PYTHON ?= $(shell v=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.13(\.[0-9]+)?$$' | sort -V | tail -1); \
	if [ -n "$$v" ]; then PYENV_VERSION=$$v pyenv which python; \
	else command -v python3.13 || command -v $(PYTHON); fi)
# This machine has Python 3.11; Lambda runs python3.13 (the template's default). Builds here override it.
LOCAL_RUNTIME ?= python$(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

export SAM_CLI_TELEMETRY := 0
export SAM_CLI_DISABLE_VERSION_CHECK := 1
export AWS_DEFAULT_REGION ?= us-east-1

# A second opinion on the ASL (make diff-asl): LocalStack's interpreter in its own python3.13 virtualenv
# (it needs Python >= 3.12), pinned: its in-process seams are private.
ASL_VENV := .venv-asl
ASL_PYTHON ?= $(LAMBDA_PYTHON)
ASL_PACKAGES := localstack-core==2026.3.0 rolo==0.8.9 JPype1==1.7.1 moto[server]==5.2.5
ASL_STAMP := $(ASL_VENV)/.installed-2026.3.0

# Two make runs at once in one checkout (make test beside make test, each of whose jobs runs make diff-asl) set
# up once: the second waits under a lock (flock(1), util-linux) for the first's set-up, then finds it done, instead
# of removing and rebuilding a virtualenv the first one's tests are using. Without flock, no lock.
FLOCK := $(shell command -v flock 2>/dev/null)
locked = $(if $(FLOCK),@mkdir -p build && $(FLOCK) build/.$(1).lock,)

.PHONY: run test test-long test-quick test-files test-fast test-emulator lint build bench cost capacity reliability clean setup lambda-runtime diff-asl simulate simulate-long

# LocalStack's interpreter too (.venv-asl): make test's make diff-asl job needs it, and a job that installed it
# took ~35 CPU s and a minute of make test's time on a fresh clone. Under make diff-asl's own lock, so that a
# make diff-asl beside it waits instead of rebuilding it.
setup: $(STAMP) $(NODE_STAMP) $(CHECKOV_STAMP) $(CFNGUARD_STAMP) $(CHROMIUM) $(LAMBDA_STAMP)
	$(call locked,asl) $(MAKE) --no-print-directory $(ASL_STAMP)

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium

lambda-runtime: $(LAMBDA_STAMP)

$(LAMBDA_STAMP): layers/core/requirements.txt
	rm -rf $(LAMBDA_VENV)
	$(LAMBDA_PYTHON) -m venv $(LAMBDA_VENV)
	$(LAMBDA_VENV)/bin/pip install --quiet --disable-pip-version-check "awslambdaric==$(AWSLAMBDARIC_VERSION)" boto3
	$(LAMBDA_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps \
		--target $(LAMBDA_VENV)/opt/python -r layers/core/requirements.txt
	$(LAMBDA_VENV)/bin/python -c 'import sys; print("Lambda runtime venv: python%d.%d" % sys.version_info[:2])'
	touch $@

$(STAMP): pyproject.toml
	@echo "changeflow: setting up $(VENV) (once, and again when pyproject.toml changes): boto3, moto, Powertools,"
	@echo "            aws-sam-cli, cfn-lint, pytest and hypothesis; about 2 minutes on a busy 2-core machine"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $@

$(NODE_STAMP): package.json
	@echo "changeflow: installing the npm tools (asl-validator) into node_modules (once)"
	npm install --no-audit --no-fund --silent
	touch $@

$(CHECKOV_STAMP):
	@echo "changeflow: installing checkov $(CHECKOV_VERSION) into $(CHECKOV_VENV) for make lint (once; it pins its own boto3)"
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check "checkov==$(CHECKOV_VERSION)"
	touch $@

$(CFNGUARD_STAMP):
	@echo "changeflow: fetching cfn-guard and the AWS Control Tower rules ($(CFNGUARD_PACKAGE)@$(CFNGUARD_VERSION)) into $(CFNGUARD_DIR) (once)"
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

# Every test file in its own process, so that each passes alone (a file that needs another file's fixtures,
# imports or leftovers fails here), the tests of each in a random order; beside them the workflow suite
# again with every handler in the Lambda runtime (make test-emulator runs the patch and guarantees suites
# that way too: longer) and the second interpreter's opinion on the ASL (make diff-asl). TEST_JOBS at a time, the
# longest first (tests/run_files.py). The seed is printed: `make test SEED=N` replays every file's order, and
# a failed file's line replays it alone. The security checks of make lint are tests here
# (tests/test_security.py runs the same checks, tests/test_template.py asl-validator): not run twice.
# Three jobs on this 2-core machine: a job waits part of its time (its subprocesses, a Wait's sleep, the
# stack's thread hand-offs), and two jobs kept 1.66 cores busy, three 1.9 (12 files, 2026-11-26: 116 s, 100 s).
TEST_JOBS ?= 3
test:
	$(call locked,setup) $(MAKE) --no-print-directory setup
	$(BIN)/python tests/run_files.py --jobs $(TEST_JOBS) $(if $(SEED),--seed $(SEED))

# make test with CHANGEFLOW_LONG=1: the cases make test leaves out to keep within CI's budget (larger K, more
# seeds, faults repeated, every configuration; each file says which, docs/tests.md lists them). Long.
test-long:
	$(call locked,setup) $(MAKE) --no-print-directory setup
	CHANGEFLOW_LONG=1 $(BIN)/python tests/run_files.py --jobs $(TEST_JOBS) $(if $(SEED),--seed $(SEED))

# The inner loop (under a minute): the unit tests (validation, the hash chain and the digests' tree, the handlers on plain moto,
# the layout's rules, the documentation's tables, the second interpreter's comparison) in one process, in a random
# order. Then the suite of what you changed, e.g. `.venv/bin/pytest tests/test_workflow.py`.
QUICK_TESTS := tests/test_validation.py tests/test_chain.py tests/test_handlers.py tests/test_architecture.py \
	tests/test_readme_tables.py tests/test_diffasl.py tests/test_digest_tree.py
test-quick: $(STAMP)
	$(BIN)/pytest --random-order -q $(QUICK_TESTS)

$(ASL_STAMP): pyproject.toml
	@$(ASL_PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 12))' || { echo "make diff-asl: LocalStack's interpreter needs Python >= 3.12; no python3.13 found (pyenv or PATH)" >&2; exit 1; }
	@echo "Setting up $(ASL_VENV) (python3.13, LocalStack's ASL interpreter, ~360 MB, about a minute)..."
	rm -rf $(ASL_VENV)
	$(ASL_PYTHON) -m venv $(ASL_VENV)
	$(ASL_VENV)/bin/pip install --quiet --disable-pip-version-check $(ASL_PACKAGES)
	$(ASL_VENV)/bin/pip install --quiet --disable-pip-version-check -e .
	touch $@

# The same change requests through moto's and LocalStack's interpreters, with the real handlers; an
# unexplained difference (tests/asl_known_differences.json) or a result against the design fails.
diff-asl:
	$(call locked,asl) $(MAKE) --no-print-directory $(ASL_STAMP)
	$(ASL_VENV)/bin/python -m changeflow.checks.diffasl

test-emulator: $(STAMP) $(LAMBDA_STAMP)
	CHANGEFLOW_LAMBDA_RUNTIME=emulator $(BIN)/pytest tests/test_workflow.py tests/test_patch.py tests/test_guarantees.py

# Each test file on its own, in its own process, without make test's other suites (make test does this too).
test-files: $(STAMP)
	$(BIN)/python tests/run_files.py --no-extras --jobs $(TEST_JOBS) $(if $(SEED),--seed $(SEED))

test-fast: $(STAMP) $(CHROMIUM)
	$(BIN)/pytest -m "not slow"

# cfn-lint, sam validate --lint, cfn-lint-serverless, checkov, cfn-guard (Control Tower rules and
# rules/changeflow.guard): see src/changeflow/checks/security.py and docs/operations.md (Security).
lint: setup
	$(BIN)/python -m changeflow.checks.security
	npx --no-install asl-validator --json-path statemachines/change.asl.json

build: $(STAMP)
	$(BIN)/sam build --parameter-overrides Runtime=$(LOCAL_RUNTIME)

# Each measurement target's budget. QUICK=1 runs the same commands on a small one (a few changes, one seed,
# 1 KB only...): tests/test_make_targets.py runs every documented target that way, in a copy of the project, so
# that none can break unseen; its figures are not to be read.
ifdef QUICK
COST_FLAGS := --quick
ARCHIVE_FLAGS := --changes 3
ASOF_FLAGS := --sizes 10
DIGESTS_FLAGS := --sizes 200 --compute 200,2000
CAPACITY_FLAGS := --quick
RELIABILITY_FLAGS := --quick
EMBEDDED_VS_DIRECT_FLAGS := --entities 2 --rounds 1
API_FRONT_FLAGS := --requests 2
RUNTIME_FLAGS := --invokes 3 --changes 3
COLD_START_FLAGS := --quick
SCALING_FLAGS := --checkpoints 10,20 --entities 10 --window 5
MEMORY_FLAGS := --fill 10 --measure 5 --entities 2
TRANSFER_FLAGS := --sizes 20 --alone-sizes 20 --concurrency 2 --one-entity 5
else
COST_FLAGS :=
ARCHIVE_FLAGS :=
ASOF_FLAGS :=
DIGESTS_FLAGS :=
CAPACITY_FLAGS := --contention 10,50
RELIABILITY_FLAGS := --examples 100
# each path's instructions per change under callgrind (28 changes, about a minute), where valgrind is installed
EMBEDDED_VS_DIRECT_FLAGS := $(if $(shell command -v valgrind),--instructions 4)
endif

# Measurements for the documentation (none is a timed assertion in the tests): each benchmark writes its
# JSON to build/bench/, and benchmarks/readme_tables.py renders its tables (build/bench/*.md, dated) into
# the marked blocks of the page holding each (docs/cost.md, docs/embedded-stack.md), so the pages say what
# was measured and when.
bench: $(STAMP) $(LAMBDA_STAMP)
	@mkdir -p build/bench
	$(BIN)/python benchmarks/embedded_vs_direct.py --json $(EMBEDDED_VS_DIRECT_FLAGS) > build/bench/embedded_vs_direct.json.tmp
	mv build/bench/embedded_vs_direct.json.tmp build/bench/embedded_vs_direct.json
	$(BIN)/python benchmarks/readme_tables.py build/bench/embedded_vs_direct.json
	$(BIN)/python benchmarks/api_front.py $(API_FRONT_FLAGS)
	$(BIN)/python benchmarks/runtime.py $(RUNTIME_FLAGS)
	$(BIN)/python benchmarks/cold_start.py $(COLD_START_FLAGS)
	$(BIN)/python benchmarks/scaling.py $(SCALING_FLAGS)
	$(BIN)/python benchmarks/memory.py $(MEMORY_FLAGS)
	$(BIN)/python benchmarks/transfer.py $(TRANSFER_FLAGS)

# The cost model (changeflow.cost): units, logs and the complete bill per entry point, cold starts, packages
# and contention, into docs/cost.md; then the archive and as-of figures.
cost: $(STAMP)
	@mkdir -p build/bench
	$(BIN)/python benchmarks/cost.py --json $(COST_FLAGS) > build/bench/cost.json.tmp
	mv build/bench/cost.json.tmp build/bench/cost.json
	$(BIN)/python benchmarks/readme_tables.py build/bench/cost.json
	$(BIN)/python benchmarks/cost.py --bill-of build/bench/cost.json
	$(BIN)/python benchmarks/archive.py $(ARCHIVE_FLAGS)
	$(BIN)/python benchmarks/asof.py $(ASOF_FLAGS)
	$(BIN)/python benchmarks/digests.py $(DIGESTS_FLAGS)

# Where changeflow stops on AWS (issue 25): every quota cited, the first wall for Standard and Express at
# 10², 10³ and 10⁴ changes/s and for one hot entity, the simulation calibrated against make cost's contention
# rows (the embedded stack's latencies measured first, a few seconds; and the contention run at K = 10 and 50
# measured again now, under a minute), and its predictions for AWS; the tables replace the generated blocks
# of docs/capacity.md. About 3 minutes on a loaded 2-core machine.
capacity: $(STAMP)
	$(BIN)/changeflow capacity --write $(CAPACITY_FLAGS)

reliability: $(STAMP)
	$(BIN)/python benchmarks/reliability.py $(RELIABILITY_FLAGS)

# The simulation of the whole system (issue 32, docs/guarantees.md): `make simulate SEED=N` replays seed N
# exactly (OPS=3,7: only those of its operations; PLAN=FILE: a plan a shrink wrote; SHRINK=1: shrink each
# kind of violation found and print the command that replays it; JSON=1: the report as JSON); SEEDS=A-B
# runs a campaign. `make simulate-long HOURS=4 [SEED=first]` runs seeds until then, printing every failing
# seed shrunk to a small reproduction (and appending it to build/simulate/long.jsonl).
simulate: $(STAMP)
	$(BIN)/python -m changeflow.checks.simulation $(if $(PLAN),--plan $(PLAN),$(if $(SEEDS),--seeds $(SEEDS),--seed $(or $(SEED),0)) $(if $(OPS),--ops $(OPS))) $(if $(SHRINK),--shrink) $(if $(JSON),--json)

simulate-long: $(STAMP)
	$(BIN)/python -m changeflow.checks.simulation --long --hours $(or $(HOURS),4) $(if $(SEED),--from $(SEED))

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(LAMBDA_VENV) $(ASL_VENV) .tools build node_modules .aws-sam .pytest_cache .hypothesis
