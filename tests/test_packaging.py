"""The tested stack: the installed packages, the lock (requirements/lock-linux-x86_64.txt) and the
conda environment hold the same releases, and the lock meets pyproject.toml's requirements."""

import importlib.util
import os
import sys

import yaml
from packaging.utils import canonicalize_name

from conftest import REPOSITORY

SPEC = importlib.util.spec_from_file_location("lock_stack", REPOSITORY / "scripts" / "lock_stack.py")
lock_stack = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(lock_stack)
THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
REFRESH = "after the suite passed on a new stack (make test STACK=newest), make lock writes it"


def lock_rows(python: str) -> dict[str, dict[str, str]]:
    return lock_stack.lock_rows(lock_stack.LOCK.read_text(), python)


def differences(installed: dict[str, str], locked: dict[str, str]) -> list[str]:
    return [f"{name}: installed {installed.get(name, 'nothing')}, the lock {locked.get(name, 'nothing')}"
            for name in sorted(installed.keys() | locked.keys()) if installed.get(name) != locked.get(name)]


def test_installed_stack_is_the_lock():
    """`make install` installs the lock's releases (IMAGENET_COG_STACK, set by make, is `locked`
    unless STACK=newest asked for the newest, which must still meet pyproject.toml's ranges)."""
    installed = lock_stack.tested_stack()
    if os.environ.get("IMAGENET_COG_STACK", "locked") == "newest":
        runtime, test = lock_stack.project_requirements()
        everything = installed[lock_stack.WORKFLOW] | installed[lock_stack.TEST]
        outside = [str(requirement) for requirement in runtime + test
                   if everything[canonicalize_name(requirement.name)] not in requirement.specifier]
        assert outside == [], f"installed outside pyproject.toml's ranges: {outside}"
        return
    locked = lock_rows(THIS_PYTHON)
    for part in (lock_stack.WORKFLOW, lock_stack.TEST):
        assert installed[part] == locked[part], (
            f"{part}: the installed stack is not the tested one ({lock_stack.LOCK.name}): "
            f"{differences(installed[part], locked[part])}; make install installs the lock, or {REFRESH}")


def test_lock_meets_pyproject_on_every_python():
    runtime, test = lock_stack.project_requirements()
    for python in lock_stack.PYTHONS:
        rows = lock_rows(python)
        everything = rows[lock_stack.WORKFLOW] | rows[lock_stack.TEST]
        for requirement, part in [(each, rows[lock_stack.WORKFLOW]) for each in runtime] + [(each, everything) for each in test]:
            name = canonicalize_name(requirement.name)
            assert name in part and part[name] in requirement.specifier, (
                f"Python {python}: the lock has {name} {part.get(name, 'nowhere')}, pyproject.toml asks {requirement}: {REFRESH}")


def test_conda_environment_is_the_lock():
    """envs/imagenet-cog.yaml is written from the lock, for the Python it names."""
    text = (REPOSITORY / "envs" / "imagenet-cog.yaml").read_text()
    python = next(entry for entry in yaml.safe_load(text)["dependencies"]
                  if isinstance(entry, str) and entry.startswith("python="))
    assert text == lock_stack.conda_environment_text(lock_stack.LOCK.read_text(), python.removeprefix("python=")), (
        "envs/imagenet-cog.yaml is not the lock's workflow part: make lock writes both")


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
