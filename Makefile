# ecotone: every target bootstraps what it needs from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
OPENENV_VENV := .venv-openenv
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

pytest: $(STAMP) $(OPENENV_VENV)/.installed
	OPENENV_PYTHON=$(CURDIR)/$(OPENENV_VENV)/bin/python $(PY) -m pytest -q

## make docs: regenerate docs/protocol.md from ecotone/wire
docs: $(STAMP)
	$(PY) -m ecotone.wire.docgen > docs/protocol.md

## make bench: ecotone vs OpenEnv vs the raw transport floor, medians into docs/benchmarks.md
bench: $(STAMP) $(OPENENV_VENV)/.installed
	$(PY) bench/run.py --openenv-python $(OPENENV_VENV)/bin/python --reps 5 --out docs/benchmarks.md

## make base-image: Debian bookworm + python3 from nothing (debootstrap; needs root), imported
## into podman and docker as localhost/ecotone-base:bookworm, the default base of `ecotone build`
base-image:
	scripts/base-image.sh

clean:
	rm -rf $(VENV) $(OPENENV_VENV) .mypy_cache .ruff_cache .pytest_cache
