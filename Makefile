# Two commands matter: `make test` (the whole suite; CI runs it) and `make demo` (the main job on its embedded default).
# Each builds .venv/ with the CPU stack once (scripts/setup_env.sh); later runs reuse it.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: env test test-fast lint clean-env

env:
	@bash scripts/setup_env.sh

test: env
	$(PY) -m pytest tests -q

test-fast: env
	$(PY) -m pytest tests -q -m "not slow"

lint: env
	$(PY) -m ruff check openrlhf_ada tests

clean-env:
	rm -rf $(VENV)
