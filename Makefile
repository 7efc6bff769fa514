# The two entry points the README promises: `make demo` and `make test`.
# Everything is installed into .venv by `make install`, which both call.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# One job per core: the demo's jobs each take one thread, and more jobs than cores only contend.
CORES ?= $(shell nproc)
# Rules call `python -m imagenet_cog ...`: that python must be the venv's.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install system-deps demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and pinned: pip must not replace a local build with a download.
install: $(BIN)/python system-deps
	@bash scripts/check-install-space.sh $(VENV)
	$(BIN)/pip install -q "torch==2.14.1" "torchvision==0.29.1" "torchcodec==0.17.0" || $(BIN)/pip install -q torch torchvision torchcodec
	$(BIN)/pip install -q -e ".[test]"

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

clean:
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf logs .snakemake report.html
