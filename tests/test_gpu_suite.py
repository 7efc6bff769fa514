"""benchmarks/gpu_suite.sh, the one command a lent GPU runs, run here on the CPU at tiny
sizes: every benchmark finishes, and its figures land in the README's GPU suite section.

Its dozen Python processes start warm (tests/warm_python.py): forks of one server that has
imported torch, torchvision, Optuna, h5py and faiss, each running its script as the
interpreter does. Imports were most of their CPU at this size; what a benchmark starts itself
(the job starts it measures) starts cold, as on the GPU node."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from warm_python import launch

from conftest import served_jobs
from imagenet_cog.warm_start import stop_server

pytestmark = pytest.mark.heavy

REPOSITORY = Path(__file__).resolve().parents[1]
BENCHMARKS = ["fused_step", "fused_step_seeds", "probe_full", "features_host", "features_device", "features_loader",
              "batched_resize",
              "finetune", "kmeans", "knn", "resident", "protocol_cost"]
SCRIPTS = {"fused_step", "probe_benchmark", "features_benchmark", "batched_resize", "finetune_benchmark",
           "kmeans_benchmark", "knn_probe", "resident_probes", "protocol_cost"}
# What the benchmarks import, once for all of them.
PRELOAD = ["numpy", "h5py", "optuna", "torch", "torchvision", "torch._dynamo", "PIL.Image", "faiss", "yaml"]


def warm_python(folder: Path, environment: dict) -> tuple[Path, subprocess.Popen, Path]:
    """An executable that runs `python ARGUMENTS` in a fork of a server started with
    ``environment``, the server and its log."""
    log = folder / "server.log"
    server, command = launch(str(log), PRELOAD, environment)
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
    python.chmod(0o755)
    return python, server, log


def test_the_gpu_suite_runs_every_benchmark_and_records_its_figures(tmp_path):
    out = tmp_path / "out"
    # The fused step is traced whole (fullgraph, as on a GPU) and run by dynamo's eager backend:
    # inductor's CPU kernels are not the Triton ones a GPU builds, and tests/test_probes_fused_step.py
    # builds and checks them (here they cost ~40 of the suite's CPU seconds).
    # PWD: the folder the script puts on PYTHONPATH, as the server has it (tests/ for the entry)
    environment = {**os.environ, "OUT": str(out), "DEVICE": "cpu", "SIZE": "tiny", "PWD": str(REPOSITORY),
                   "PYTHONPATH": str(REPOSITORY / "tests"), "TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:eager",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    server_environment = {**environment, "PYTHONPATH": os.pathsep.join(
        str(REPOSITORY / folder) for folder in ("workflow", "benchmarks", "tests"))}
    python, server, log = warm_python(tmp_path, server_environment)
    try:
        subprocess.run(["bash", "benchmarks/gpu_suite.sh"], cwd=REPOSITORY, env={**environment, "PYTHON": str(python)},
                       check=True, capture_output=True, timeout=1500)
    finally:
        stop_server(server, str(log))
    served = {Path(command).stem for _, command in served_jobs(log)}
    assert served >= SCRIPTS, log.read_text()
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == BENCHMARKS
    assert all(": exit 0 after" in line for line in summary), "\n".join(summary)
    section = (out / "gpu_suite.md").read_text()
    for expected in ("speed-up", "largest weight difference", "every run's trials, parameters and test scores equal "
                     "across the groupings: yes", "rows assigned alike", "total, overlapped", "grey level", "finetune_images_per_s"):
        assert expected in section, expected
    assert "INFO" not in section
    # recorded into a copy of the README between its markers, replaced (not added) a second time
    readme = tmp_path / "README.md"
    shutil.copy(REPOSITORY / "benchmarks" / "README.md", readme)
    for _ in range(2):
        subprocess.run([sys.executable, "benchmarks/record_gpu_suite.py", str(out), "--readme", str(readme)],
                       cwd=REPOSITORY, check=True, capture_output=True, timeout=60)
    text = readme.read_text()
    assert text.count("<!-- gpu-suite:begin -->") == 1 and section.strip() in text
    assert text.startswith((REPOSITORY / "benchmarks" / "README.md").read_text().split("<!-- gpu-suite:begin -->")[0])
