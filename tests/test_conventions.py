"""The Snakemake ecosystem's own checks, and running the workflow from outside its folder.

`snakemake --lint` and `snakefmt --check` are what the snakemake-workflows catalogue runs on
every workflow; ruff keeps the package, tests and benchmarks to one style. All three come
with the project's own install (`pip install -e .[test]`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPOSITORY, SNAKEMAKE, copy_workflow, snakemake, snakemake_environment

pytestmark = pytest.mark.heavy

TOOLS = Path(sys.executable).parent


def tool(name: str) -> str:
    path = TOOLS / name
    return str(path) if path.exists() else shutil.which(name)


def test_snakemake_lint_reports_nothing():
    result = subprocess.run(
        [str(SNAKEMAKE), "--lint"], cwd=REPOSITORY, capture_output=True, text=True, timeout=600,
        env=snakemake_environment(),
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0 and "Lints for" not in report, report[-5000:]


def test_rule_files_are_formatted_with_snakefmt():
    rule_files = [REPOSITORY / "Snakefile", *sorted((REPOSITORY / "workflow" / "rules").rglob("*.smk"))]
    result = subprocess.run(
        [tool("snakefmt"), "--check", "--diff", *map(str, rule_files)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]


def test_python_passes_ruff():
    folders = [str(REPOSITORY / name) for name in ("workflow", "tests", "benchmarks", "scripts")]
    result = subprocess.run([tool("ruff"), "check", *folders], cwd=REPOSITORY, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]


def test_a_run_from_another_folder_reads_the_workflows_config_and_resources(tmp_path):
    """`-s path/Snakefile` from an empty folder, and `--directory`: the workflow's own config and
    shipped resources are found, and the plan writes under the working directory."""
    workflow = copy_workflow(tmp_path / "workflow")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_snakefile = snakemake(elsewhere, "-s", str(workflow / "Snakefile"), "-n", "--cores", "1")
    by_directory = snakemake(workflow, "--directory", str(elsewhere), "-n", "--cores", "1")
    for result in (by_snakefile, by_directory):
        assert "wordnet_corpus" in result.stdout and "image_counts" in result.stdout
    # nothing written beside the Snakefile, and only Snakemake's own folder where it ran
    assert not (workflow / "results").exists() and not (workflow / "logs").exists()
    assert {path.name for path in elsewhere.iterdir()} <= {".snakemake"}


def test_a_configfile_lacking_keys_takes_them_from_config_yaml_and_the_schema(tmp_path):
    workflow = copy_workflow(tmp_path / "workflow")
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"probes": {"trials": 3}}))
    result = snakemake(workflow, "-n", "--cores", "1", "--configfile", str(partial))
    assert "demo_world" in result.stdout  # mode: demo, from config.yaml
    # a key none of them knows is named, with the file it comes from, before any job
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump({"probes": {"seed": [5]}}))
    failed = snakemake(workflow, "-n", "--cores", "1", "--configfile", str(wrong), check=False)
    assert failed.returncode != 0
    message = failed.stdout + failed.stderr
    assert f"{wrong}: probes.seed unknown key 'seed'" in message and "did you mean 'seeds'?" in message
