# The two entry points the README promises: `make demo` and `make test`.
# Everything is installed into .venv by `make install`, which both call.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One job per core: the demo's jobs each take one thread, and more jobs than cores only contend.
CORES ?= $(shell nproc)
# Rules call `python -m imagenet_cog ...`: that python must be the venv's.
export PATH := $(CURDIR)/$(BIN):$(PATH)
# The tested stack: every package at the release the suite last passed with (the lock, x86_64
# Linux); STACK=newest takes the newest releases pyproject.toml allows instead. The suite's lock
# check reads which was asked for.
STACK ?= locked
LOCK := requirements/lock-linux-x86_64.txt
export IMAGENET_COG_STACK := $(STACK)

.PHONY: install system-deps demo test lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python system-deps
	@bash scripts/check-install-space.sh $(VENV)
	bash scripts/install-stack.sh $(BIN) $(STACK) $(LOCK)

# WordNet 3.0 for offline use, and SLURM for the cluster test; skipped where already present or not root.
system-deps:
	@bash scripts/install-system-deps.sh

# The report lands in results/ beside the tables and figures it shows.
demo: install
	$(BIN)/snakemake --cores $(CORES) --report-after-run --report results/report.html

# One worker per core (nproc, as for the demo; xdist's `auto` counts physical cores, one on a
# two-thread core) and one more, as the SLURM test's worker mostly waits on its queue for minutes;
# each test module on one worker (its module fixtures built once), the modules in conftest's order
# (xdist would otherwise sort them by their number of tests); the 25 slowest tests and the 25 that
# used the most CPU are listed so that a slower suite shows in every log (on shared cores a test's
# wall time counts the other workers' load, its CPU seconds do not).
test: install
	$(BIN)/python -m pytest -ra -n $$(( $(CORES) + 1 )) --dist loadscope --no-loadscope-reorder --durations=25 --cpu-durations=25

# After `make test STACK=newest` passed: the installed stack becomes the tested one (the lock
# and envs/imagenet-cog.yaml written from it; uv resolves the other Pythons' rows from PyPI).
lock:
	$(BIN)/pip install -q uv
	$(BIN)/python scripts/lock_stack.py

clean:
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf logs .snakemake report.html
