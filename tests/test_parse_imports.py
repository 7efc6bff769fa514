"""Snakemake reads the Snakefile in every invocation (every job on SLURM, hundreds of runs in
this suite): reading the demo's imports none of the libraries its jobs compute with, whose
imports take seconds (torch, open_clip, matplotlib, ...)."""

from __future__ import annotations

import subprocess
import sys

from conftest import copy_workflow, snakemake_environment

JOB_LIBRARIES = ("torch", "torchvision", "open_clip", "timm", "matplotlib", "seaborn", "sklearn")
# Snakemake's own entry point in this interpreter; the libraries imported are listed after it
# returns (it ends by SystemExit).
LIST_RULES = f"""
import sys
from snakemake.cli import main
try:
    main(["--list-rules"])
except SystemExit as end:
    assert not end.code, end.code
print("imported:", *sorted(name for name in {JOB_LIBRARIES!r} if name in sys.modules))
"""


def test_reading_the_snakefile_imports_no_job_library(tmp_path):
    workdir = copy_workflow(tmp_path / "workflow")
    result = subprocess.run([sys.executable, "-c", LIST_RULES], cwd=workdir, capture_output=True, text=True,
                            env=snakemake_environment(), timeout=300)
    assert result.returncode == 0, result.stderr[-5000:]
    assert "extract_features" in result.stdout
    assert result.stdout.strip().endswith("imported:"), result.stdout.splitlines()[-1]
