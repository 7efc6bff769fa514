"""Shared fixtures: the repository as a Snakemake working copy, one finished demo run, and
a small world of generated JPEGs with its split table (extraction tests).

The end-to-end, staleness and fault tests all start from one complete run of the demo
workflow in a temporary copy of the repository, made once per test session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPOSITORY = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ["Snakefile", "config.yaml", "workflow", "resources", "envs", "slurm"]


def copy_workflow(destination: Path) -> Path:
    """A copy of the workflow's own files (no results) in ``destination``."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        source = REPOSITORY / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif source.exists():
            shutil.copy2(source, destination / name)
    return destination


SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def snakemake_environment() -> dict[str, str]:
    """Rules run `python -m imagenet_cog`: the interpreter running the tests comes first."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{SNAKEMAKE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def snakemake(workdir: Path, *arguments: str, check: bool = True, timeout: int = 1500) -> subprocess.CompletedProcess:
    """Run Snakemake from this interpreter's environment in ``workdir``."""
    result = subprocess.run(
        [str(SNAKEMAKE), *arguments],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=snakemake_environment(),
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(arguments)} failed ({result.returncode}):\n"
            f"{result.stdout[-5000:]}\n{result.stderr[-10000:]}"
        )
    return result


def other_probe_kinds(config: dict) -> list[str]:
    """The probe kinds a config runs on their own grid (rule probe_kind): the MLP kinds, and
    pca-<d> per d (not knn, which runs on the linear probe's grid in jobs of its own)."""
    probes = config["probes"]
    kinds = [kind for kind in probes["kinds"] if kind not in ("linear", "pca", "knn")]
    return kinds + ([f"pca-{dim}" for dim in probes["pca_dims"]] if "pca" in probes["kinds"] else [])


def other_kind_probes_per_dataset(config: dict) -> int:
    """Probe runs of the kinds besides linear per model and dataset, on their own grid."""
    probes = config["probes"]
    shots = probes.get("other_kinds_shots") or probes["shots"]
    seeds = probes.get("other_kinds_seeds") or probes["seeds"]
    return len(other_probe_kinds(config)) * len(shots) * len(seeds)


def make_world(root: Path, concepts: int = 3, train: int = 5, test: int = 2, corrupt: tuple[str, ...] = ()) -> Path:
    """Generated JPEGs under root/images and their split table root/splits.tsv."""
    rng = np.random.default_rng(0)
    lines = ["path\twnid\tlabel\tsplit"]
    for label in range(concepts):
        wnid = f"n{label:08d}"
        (root / "images" / wnid).mkdir(parents=True, exist_ok=True)
        for number in range(train + test):
            relative = f"{wnid}/{wnid}_{number}.JPEG"
            size = (40 + 3 * number, 36 + 5 * label)
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / "images" / relative)
            if relative in corrupt:
                (root / "images" / relative).write_bytes(b"\xff\xd8\xff\xe0 truncated")
            lines.append(f"{relative}\t{wnid}\t{label}\t{'train' if number < train else 'test'}")
    (root / "splits.tsv").write_text("\n".join(lines) + "\n")
    return root / "splits.tsv"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Path:
    """A working copy in which the whole demo workflow has run to completion."""
    workdir = copy_workflow(tmp_path_factory.mktemp("demo") / "workflow-copy")
    snakemake(workdir, "--cores", "2")
    return workdir


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a test module: probes this small gain nothing from threads, and
    on a busy machine threads spin."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
