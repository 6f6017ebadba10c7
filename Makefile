# make plan [STACK=lab] [OUT=plan.json]  offline preview (creates the venv that Pulumi.yaml names)
# make test                              lint + the whole test suite (what CI runs)
# make lint                              ruff
STACK ?= prod
VENV := venv
PY := $(VENV)/bin/python

.PHONY: plan test lint

$(VENV)/.runtime: requirements.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.dev: requirements-dev.txt $(VENV)/.runtime
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

plan: $(VENV)/.runtime
	$(PY) -m stacks.plan $(STACK) $(if $(OUT),--out $(OUT))

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	$(PY) -m pytest -q
