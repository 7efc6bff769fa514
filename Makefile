# The two entry points the README promises: `make demo` and `make test`.
# Everything is installed into .venv by `make install`, which both call.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORES ?= 8
# Rules call `python -m imagenet_cog ...`: that python must be the venv's.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: install system-deps demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first and pinned: pip must not replace a local build with a download.
install: $(BIN)/python system-deps
	$(BIN)/pip install -q "torch==2.14.1" "torchvision==0.29.1" || $(BIN)/pip install -q torch torchvision
	$(BIN)/pip install -q -e ".[test]"

# WordNet 3.0 for offline use, and SLURM for the cluster test; skipped where already present or not root.
system-deps:
	@bash scripts/install-system-deps.sh

# The report lands in results/ beside the tables and figures it shows.
demo: install
	$(BIN)/snakemake --cores $(CORES) --report-after-run --report results/report.html

test: install
	$(BIN)/python -m pytest -ra

clean:
	find results -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf logs .snakemake report.html
