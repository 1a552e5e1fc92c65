# durable-tools: `make demo` and `make test` install what they need themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install format lint typecheck test demo bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

NODE_STAMP := node_modules/.installed

# MCP servers from npm that the tests run (pinned in package-lock.json).
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

install: $(STAMP)

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m pyright

test: lint typecheck $(NODE_STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m examples.demo_story

bench: $(STAMP)
	$(PY) bench/validation.py
	$(PY) bench/history_growth.py
