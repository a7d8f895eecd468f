# ecotone: every target bootstraps what it needs from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
OPENENV_VENV := .venv-openenv
MCP_VENV := .venv-mcp
MCP_NODE := .mcp-node
TRL_VENV := .venv-trl
VF_VENV := .venv-vf
NEMO_VENV := .venv-nemo
RAY_VENV := .venv-ray
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench docs base-image clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make demo: serve the bundled `echo` env and play an episode against it over WebSocket
demo: $(STAMP)
	$(VENV)/bin/ecotone play echo --steps 10

## make test: lint, format check, dependency rule (import-linter), the client's blocking face
## generated from its async one (scripts/unasync.py --check), type check, the test suite
test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check ecotone tests bench
	$(VENV)/bin/ruff format --check ecotone tests bench
	$(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/unasync.py --check

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The real `openenv` package (pinned) lives in its own venv: its server and client run as
# separate processes in the interop tests and the benchmark, as they would for a user.
$(OPENENV_VENV)/.installed: bench/requirements-openenv.txt
	test -x $(OPENENV_VENV)/bin/python || $(PYTHON) -m venv $(OPENENV_VENV)
	$(OPENENV_VENV)/bin/python -m pip install --quiet -r bench/requirements-openenv.txt
	touch $@

# MCP servers and a client nobody here wrote (tests/mcp_servers): Python ones in their own
# venv, Node ones (npm, pinned by the lock file) in .mcp-node; the tests run them as programs.
# Without npm the Node part is left out here (those tests skip, or fail on CI).
$(MCP_VENV)/.installed: tests/mcp_servers/requirements.txt
	test -x $(MCP_VENV)/bin/python || $(PYTHON) -m venv $(MCP_VENV)
	$(MCP_VENV)/bin/python -m pip install --quiet -r tests/mcp_servers/requirements.txt
	touch $@

$(MCP_NODE)/.installed: tests/mcp_servers/package.json tests/mcp_servers/package-lock.json
	if command -v npm >/dev/null 2>&1; then \
	  mkdir -p $(MCP_NODE) && cp tests/mcp_servers/package.json tests/mcp_servers/package-lock.json $(MCP_NODE)/ \
	  && npm ci --prefix $(MCP_NODE) --no-audit --no-fund --silent && touch $@; \
	else echo "make: no npm: the tests with Node MCP servers will skip" >&2; fi

# A trainer (TRL, transformers, a CPU build of torch 2.13.0; pinned by tests/trl/) with
# ecotone beside it, in its own venv: the GRPO test trains in a subprocess with its python.
$(TRL_VENV)/.installed: tests/trl/requirements.txt tests/trl/constraints.txt pyproject.toml
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TRL_VENV)/bin/python -m pip install --quiet -c tests/trl/constraints.txt torch==2.13.0
	$(TRL_VENV)/bin/python -m pip install --quiet -c tests/trl/constraints.txt \
	  -r tests/trl/requirements.txt -e .
	touch $@

# verifiers (a consumer of OpenEnv servers; pinned by tests/verifiers/) in its own venv: the
# consumer test drives an ecotone server through its OpenEnv taskset in a subprocess.
$(VF_VENV)/.installed: tests/verifiers/requirements.txt tests/verifiers/constraints.txt
	test -x $(VF_VENV)/bin/python || $(PYTHON) -m venv $(VF_VENV)
	$(VF_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VF_VENV)/bin/python -m pip install --quiet -c tests/verifiers/constraints.txt \
	  -r tests/verifiers/requirements.txt
	touch $@

# NeMo Gym (pinned by tests/nemo/) needs Python 3.12: on PATH, else pyenv's. Without one the
# NeMo Gym test skips here (and fails on CI).
$(NEMO_VENV)/.installed: tests/nemo/requirements.txt tests/nemo/constraints.txt
	py=$$(ls -1d $$HOME/.pyenv/versions/3.12*/bin/python 2>/dev/null | tail -1); \
	if [ -z "$$py" ] && python3.12 -c '' 2>/dev/null; then py=python3.12; fi; \
	if [ -z "$$py" ]; then echo "make: no Python 3.12: the NeMo Gym test will skip" >&2; exit 0; fi; \
	test -x $(NEMO_VENV)/bin/python || $$py -m venv $(NEMO_VENV) && \
	$(NEMO_VENV)/bin/python -m pip install --quiet --upgrade pip && \
	$(NEMO_VENV)/bin/python -m pip install --quiet -c tests/nemo/constraints.txt \
	  -r tests/nemo/requirements.txt && touch $@

# Ray (pinned by tests/ray/) with ecotone beside it: the ray provider's test starts a real
# multi-node cluster in network namespaces and drives it with this venv's python.
$(RAY_VENV)/.installed: tests/ray/requirements.txt pyproject.toml
	test -x $(RAY_VENV)/bin/python || $(PYTHON) -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RAY_VENV)/bin/python -m pip install --quiet -r tests/ray/requirements.txt -e .
	touch $@

pytest: $(STAMP) $(OPENENV_VENV)/.installed $(MCP_VENV)/.installed $(MCP_NODE)/.installed \
	  $(TRL_VENV)/.installed $(VF_VENV)/.installed $(NEMO_VENV)/.installed $(RAY_VENV)/.installed
	OPENENV_PYTHON=$(CURDIR)/$(OPENENV_VENV)/bin/python MCP_VENV=$(CURDIR)/$(MCP_VENV) \
	  MCP_NODE=$(CURDIR)/$(MCP_NODE) TRL_PYTHON=$(CURDIR)/$(TRL_VENV)/bin/python \
	  VERIFIERS_PYTHON=$(CURDIR)/$(VF_VENV)/bin/python RAY_PYTHON=$(CURDIR)/$(RAY_VENV)/bin/python \
	  NEMO_PYTHON=$(if $(wildcard $(NEMO_VENV)/.installed),$(CURDIR)/$(NEMO_VENV)/bin/python,) \
	  $(PY) -m pytest -q

## make docs: regenerate docs/protocol.md from ecotone/specs
docs: $(STAMP)
	$(PY) -m ecotone.specs.docgen > docs/protocol.md

## make bench: ecotone vs OpenEnv vs the raw transport floor, medians into docs/benchmarks.md
bench: $(STAMP) $(OPENENV_VENV)/.installed $(RAY_VENV)/.installed
	$(PY) -m compileall -q ecotone  # as a pip install leaves it (servers start from bytecode)
	$(PY) bench/run.py --openenv-python $(OPENENV_VENV)/bin/python --reps 7 --out docs/benchmarks.md
	$(PY) bench/sandbox.py --reps 5 --out docs/benchmarks.md
	$(PY) bench/snapshots.py --reps 5 --out docs/benchmarks.md
	$(PY) bench/collect_overhead.py --reps 5 --out docs/benchmarks.md
	$(PY) bench/multiagent.py --reps 5 --turns 2000 --out docs/benchmarks.md
	$(PY) bench/inplace.py --reps 3 --out docs/benchmarks.md
	$(PY) bench/isolation.py --reps 5 --out docs/benchmarks.md
	$(PY) bench/pools.py --episodes 256 --servers 64 --handouts 40 --launches 20 --out docs/benchmarks.md
	$(PY) bench/ray_cluster.py --ray-python $(RAY_VENV)/bin/python --out docs/benchmarks.md

## make base-image: Debian bookworm + python3 from nothing (debootstrap; needs root), imported
## into podman and docker as localhost/ecotone-base:bookworm, the default base of `ecotone build`
base-image:
	scripts/base-image.sh

clean:
	rm -rf $(VENV) $(OPENENV_VENV) $(MCP_VENV) $(MCP_NODE) $(TRL_VENV) $(VF_VENV) $(NEMO_VENV) $(RAY_VENV) \
	  .mypy_cache \
	  .ruff_cache \
	  .pytest_cache
