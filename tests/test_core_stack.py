"""What a result records of the stack it was computed with (imagenet_cog.core.stack)."""

from __future__ import annotations

import importlib.metadata
import tomllib

import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import REPOSITORY
from imagenet_cog.core.stack import NUMBER_LIBRARIES, stack_versions

# pyproject's dependencies whose release moves no number: each says what it does instead
MOVES_NO_NUMBER = {
    "snakemake": "schedules the jobs",
    "snakemake-executor-plugin-slurm": "submits them to SLURM",
    "matplotlib": "draws the figures of numbers computed before",
    "seaborn": "draws the figures",
    "pyyaml": "reads the config",
    "jsonschema": "checks it",
    "tabulate": "writes the tables' Markdown",
    "pyarrow": "reads a Hub copy's image bytes, which PIL decodes",
    "huggingface-hub": "finds a transformers release's files (its commit is the model's identity)",
}


def test_every_dependency_is_recorded_or_said_to_move_no_number():
    """A new dependency is a decision: recorded with every result, or named here with why not."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    names = {canonicalize_name(Requirement(text).name) for text in project["dependencies"]}
    assert names - set(NUMBER_LIBRARIES) - set(MOVES_NO_NUMBER) == set()
    assert set(MOVES_NO_NUMBER) <= names, "a library named here that pyproject no longer lists"


def test_a_result_names_each_installed_librarys_release_and_torchs_build():
    versions = stack_versions()
    for library in NUMBER_LIBRARIES:
        try:
            installed = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            assert library not in versions
            continue
        if library != "torch":
            assert versions[library] == installed, library
    assert versions["torch"] == torch.__version__ and versions["torch"].startswith(importlib.metadata.version("torch"))
    assert versions["cuda"] == (torch.version.cuda or "none") and versions["imagenet_cog"] and versions["python"]
