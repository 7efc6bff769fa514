"""benchmarks/gpu_suite.sh, the one command a lent GPU runs, run here on the CPU at tiny
sizes: every benchmark finishes, and its figures land in the README's GPU suite section."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
BENCHMARKS = ["fused_step", "fused_step_seeds", "probe_full", "features_host", "features_device", "features_loader",
              "batched_resize",
              "finetune", "kmeans", "knn", "resident", "protocol_cost"]


def test_the_gpu_suite_runs_every_benchmark_and_records_its_figures(tmp_path):
    out = tmp_path / "out"
    # The fused step is traced whole (fullgraph, as on a GPU) and run by dynamo's eager backend:
    # inductor's CPU kernels are not the Triton ones a GPU builds, and tests/test_probes_fused_step.py
    # builds and checks them (here they cost ~40 of the suite's CPU seconds).
    environment = {**os.environ, "OUT": str(out), "DEVICE": "cpu", "SIZE": "tiny", "PYTHON": sys.executable,
                   "TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:eager",
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["bash", "benchmarks/gpu_suite.sh"], cwd=REPOSITORY, env=environment, check=True,
                   capture_output=True, timeout=1500)
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
