# make plan [STACK=lab] [OUT=plan.json]  offline preview (creates the venv that Pulumi.yaml names)
# make test                              lint + workflow lint + the whole test suite (what CI runs)
# make lint                              ruff
# make docs                              regenerate docs/settings.md, docs/stack-config.schema.json, docs/air-gap.md
# make lint-workflows                    .github/workflows/*.yml against the GitHub workflow schema
# make install                           only the venv with the runtime requirements (what `pulumi up` uses)
STACK ?= prod
VENV := venv
PY := $(VENV)/bin/python

.PHONY: plan test lint lint-workflows install docs bench

$(VENV)/.runtime: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

install: $(VENV)/.runtime

plan: $(VENV)/.runtime
	$(PY) -m stacks.plan $(STACK) $(if $(OUT),--out $(OUT))

# Generated from the settings models (stacks/docs.py); tests/test_docs.py fails when they are stale.
docs: $(VENV)/.runtime
	$(PY) -m stacks.docs

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# check-jsonschema ships SchemaStore's github-workflow schema in its wheel: it checks offline.
lint-workflows: $(VENV)/.dev
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

test: lint lint-workflows
	$(PY) -m pytest -q

# make bench                             scale benchmark (50/200/1000 generated nodes): writes docs/benchmarks.md
#                                        (CI runs the 50-node case in tests/test_benchmarks.py)
bench: $(VENV)/.dev
	$(PY) -m benchmarks.run --nodes 50 200 1000 --profile 1000 --out docs/benchmarks.md
