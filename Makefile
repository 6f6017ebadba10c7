# make plan [STACK=lab] [OUT=plan-lab.json]  offline preview (creates the venv that Pulumi.yaml names)
# make test                              lint + workflow lint + make reference + the whole test suite (what CI runs)
# make reference [MIRROR=URL]            fetch the pinned upstream reference files the tests check against
#                                        (reference/fetch-list.tsv, verified by digest) into ~/.cache/ml-platform/reference;
#                                        MIRROR: an HTTP server serving a copy of that directory instead of upstream
# make test-fast                         every test that starts no real server (pytest -m "not real_server"):
#                                        no root, no package mirror, any OS with Python 3.11+
# make test-hosts                        only the plan's host steps on booted Debian 12 machines over real SSH through
#                                        a bastion (tests/test_hosts.py, part of make test; root, the Debian mirror),
#                                        printing what it measured
# make lint                              ruff
# make screenshot                        docs/img/zabbix-dashboard.png, zabbix-teams.png, zabbix-queues.png and
#                                        zabbix-team-queues.png: the dashboards in the real
#                                        Zabbix 7.0 frontend with test data (root; installs Debian's chromium)
# make docs                              regenerate docs/settings.md, docs/stack-config.schema.json, docs/air-gap.md,
#                                        docs/architecture.md (diagrams from the prod plan)
# make images                            docs/images.md: every image each Helm release runs, per stack, rendered by
#                                        Helm from the reference charts (`make reference` first)
# make lint-workflows                    actionlint (with shellcheck on `run:` scripts) + the GitHub workflow schema
# make install                           only the venv with the runtime requirements (what `pulumi up` uses)
# make lock                              re-pin requirements.lock / requirements-dev.lock from the ranges in
#                                        requirements.txt / requirements-dev.txt (then review and commit both)
STACK ?= prod
VENV := venv
PY := $(VENV)/bin/python
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check
PIP_COMPILE := $(VENV)/bin/pip-compile --quiet --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links

.PHONY: plan test test-fast test-hosts lint lint-workflows install docs images bench lock reference screenshot

# Installs the exact versions of the lock files: a provider SDK cannot change under a reviewed plan.
$(VENV)/.runtime: requirements.lock
	python3 -m venv $(VENV)
	$(PIP_INSTALL) -r requirements.lock
	touch $@

$(VENV)/.dev: requirements-dev.lock $(VENV)/.runtime
	$(PIP_INSTALL) -r requirements-dev.lock
	touch $@

install: $(VENV)/.runtime

lock: $(VENV)/.dev
	$(PIP_COMPILE) --upgrade --output-file requirements.lock requirements.txt
	$(PIP_COMPILE) --upgrade --output-file requirements-dev.lock requirements-dev.txt

plan: $(VENV)/.runtime
	$(PY) -m stacks.plan $(STACK) $(if $(OUT),--out $(OUT))

# Generated from the settings models (stacks/docs.py) and the prod plan (stacks/diagrams.py); tests/test_docs.py
# and tests/test_diagrams.py fail when they are stale.
docs: $(VENV)/.runtime
	$(PY) -m stacks.docs
	$(PY) -m stacks.diagrams

# The image list an air-gapped site mirrors (stacks/render.py); tests/test_render_checks.py fails when stale.
images: $(VENV)/.dev
	$(PY) -m stacks.render prod lab --out docs/images.md

# The real Zabbix 7.0 of the tests (tests/monitoring/start-zabbix-api.sh) draws them; tests/monitoring/test_dashboards.py
# renders the same dashboard in `make test`.
screenshot: $(VENV)/.dev
	$(PY) -m tests.monitoring.dashboard_screenshot
	$(PY) -m tests.monitoring.queue_screenshot

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# actionlint reads .github/actionlint.yaml (the self-hosted runner's labels) and runs shellcheck on every
# `run:` script; check-jsonschema ships SchemaStore's github-workflow schema in its wheel. Both offline.
lint-workflows: $(VENV)/.dev
	$(VENV)/bin/actionlint -shellcheck $(VENV)/bin/shellcheck .github/workflows/*.yml
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

test: lint lint-workflows reference
	$(PY) -m pytest -q

# Prints what it ran: steps and seconds, fingerprints, interruption cases, drift cases, the SSH burst.
test-hosts: $(VENV)/.dev
	$(PY) -m pytest -q -s -p no:cacheprovider tests/test_hosts.py

test-fast: $(VENV)/.dev
	$(PY) -m pytest -q -m "not real_server"

# Into stacks.reference.reference_dir() ($$MLP_REFERENCE_DIR, else the cache); what is there and verifies stays.
reference: $(VENV)/.runtime
	$(PY) -m stacks.reference $(if $(MIRROR),--mirror $(MIRROR))

# make bench                             scale benchmark (50/200/1000 generated nodes): writes docs/benchmarks.md
#                                        (CI runs the 50-node case in tests/test_benchmarks.py)
bench: $(VENV)/.dev
	$(PY) -m benchmarks.run --nodes 50 200 1000 --profile 1000 --out docs/benchmarks.md
