"""The conda environment and pyproject.toml must list the same dependencies."""

import re
from pathlib import Path

import tomllib
import yaml

REPOSITORY = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}


def requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0].strip().lower()


def test_conda_environment_matches_pyproject():
    pyproject = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())
    wanted = {
        CONDA_NAMES.get(name, name): requirement
        for requirement in pyproject["project"]["dependencies"]
        for name in [requirement_name(requirement)]
    }
    environment = yaml.safe_load((REPOSITORY / "envs" / "imagenet-cog.yaml").read_text())
    listed = {
        requirement_name(entry): entry
        for entry in environment["dependencies"]
        if isinstance(entry, str) and requirement_name(entry) not in ("python", "pip")
    }
    assert set(listed) == set(wanted), (
        f"only in pyproject: {sorted(set(wanted) - set(listed))}; "
        f"only in envs/imagenet-cog.yaml: {sorted(set(listed) - set(wanted))}"
    )
    for name, requirement in wanted.items():
        assert listed[name].replace(" ", "")[len(name):] == requirement.replace(" ", "")[len(requirement_name(requirement)):], name


def test_schema_defaults_fill_an_empty_config():
    from snakemake.utils import validate

    config = {}
    validate(config, str(REPOSITORY / "workflow" / "schemas" / "config.schema.yaml"))
    assert config["probes"]["trials"] == 30
    assert config["probes"]["seeds"] == [22, 37, 45, 77, 93]
    assert config["probes"]["kinds"] == ["linear"] and config["probes"]["pca_dims"] == [32, 64, 128, 256, 512, 1024]
    assert config["probes"]["mlp"] == {"hidden_width": 2048, "hidden_layers": 2, "lr_range": [0.1, 100.0],
                                       "noact_lr_range": [0.01, 10.0], "wd_range": [1e-8, 1e-4]}
    assert config["levels"]["concepts_per_level"] == 1000
    assert config["models"]["resnet50"]["arch"] == "resnet50"
