"""Refresh the tested stack from the environment the suite last passed in (`make lock`).

Writes ``requirements/lock-linux-x86_64.txt``: the exact release of every package the project
and its test extra need (pyproject.toml, followed through the installed packages' own
requirements), for x86_64 Linux and each Python of ``PYTHONS`` (3.10 cannot install
Snakemake 8 or later). The running Python's rows are the
installed releases as they are; the other versions' rows are resolved from PyPI's metadata by
``uv pip compile``, preferring the same releases, so that a release that leaves a Python behind
gets a row of its own for it (``python_version`` markers). uv also resolves the running
Python's rows from PyPI, pinned, which proves they are installable from there as one set.
Then writes ``envs/imagenet-cog.yaml`` from the lock's workflow part for the running Python.

`make install` installs with the lock as pip constraints; tests/test_packaging.py holds the
installed stack, the lock and the conda environment equal. Standard library, ``packaging`` and
uv (on PATH, or the ``uv`` package installed beside this Python).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPOSITORY = Path(__file__).resolve().parents[1]
LOCK = REPOSITORY / "requirements" / "lock-linux-x86_64.txt"
CONDA_ENVIRONMENT = REPOSITORY / "envs" / "imagenet-cog.yaml"
PYTHONS = ("3.11", "3.12")
PLATFORM = "x86_64-manylinux_2_28"
WORKFLOW, TEST = "the workflow", "the test suite's tools (pyproject's [test] extra)"

LOCK_HEADER = """\
# The tested stack: the exact releases `make test` last passed with, for x86_64 Linux and
# Python {pythons}. Python {tested}'s rows are the releases the suite ran on; the other versions'
# rows were resolved for them from PyPI's metadata, the same releases where they support them.
# `make install` installs with this file as pip constraints (`make install STACK=newest`: the
# newest releases pyproject.toml allows). After the suite passes on a new stack, `make lock`
# writes this file and envs/imagenet-cog.yaml again (scripts/lock_stack.py): do not edit.
"""

CONDA_HEADER = """\
# Conda environment for `snakemake --sdm conda` and for users who prefer conda: the workflow's part
# of the tested stack (requirements/lock-linux-x86_64.txt) for Python {tested}, PyPI's releases
# installed by pip (conda-forge's builds carry other versions). Written with the lock by
# `make lock` (scripts/lock_stack.py): do not edit. The workflow's own package needs no install:
# rules import it from the checkout.
name: imagenet-cog
channels:
  - conda-forge
  - nodefaults
dependencies:
  - python={tested}
  - pip
  - pip:
"""


def project_requirements() -> tuple[list[Requirement], list[Requirement]]:
    """pyproject.toml's dependencies and its test extra."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    return ([Requirement(text) for text in project["dependencies"]],
            [Requirement(text) for text in project["optional-dependencies"]["test"]])


def installed_closure(requirements: list[Requirement]) -> dict[str, str]:
    """Every installed package ``requirements`` need, through their own requirements, for this
    Python and platform: canonical name -> installed version."""
    found: dict[str, str] = {}
    pending = [(requirement, "") for requirement in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"{requirement} is not installed: install the stack first (make install)") from None
        if name not in found:
            found[name] = distribution.version
            pending += [(Requirement(text), "") for text in distribution.requires or []]
        for wanted in requirement.extras:
            pending += [(Requirement(text), wanted) for text in distribution.requires or []]
    return found


def tested_stack() -> dict[str, dict[str, str]]:
    """The installed releases of the workflow's part and of the test tools' part."""
    runtime, test = project_requirements()
    workflow = installed_closure(runtime)
    everything = installed_closure(runtime + test)
    return {WORKFLOW: workflow, TEST: {name: version for name, version in everything.items() if name not in workflow}}


def uv_command() -> list[str]:
    if shutil.which("uv"):
        return ["uv"]
    try:
        from uv import find_uv_bin
    except ImportError:
        raise SystemExit("uv is needed to resolve the other Pythons' rows: pip install uv") from None
    return [find_uv_bin()]


def resolve(python: str, preferred: dict[str, str], extras: list[str], pinned: bool) -> dict[str, str]:
    """uv's resolution of pyproject.toml (with ``extras``) for ``python`` on x86_64 Linux, from
    PyPI: ``preferred`` as preferences (uv keeps the releases of an existing output file where it
    can) or, with ``pinned``, as constraints."""
    with tempfile.TemporaryDirectory() as folder:
        pins = "".join(f"{name}=={version}\n" for name, version in sorted(preferred.items()))
        output = Path(folder) / "resolved.txt"
        output.write_text(pins)
        command = [*uv_command(), "pip", "compile", str(REPOSITORY / "pyproject.toml"), "--quiet", "--no-header",
                   "--no-annotate", "--python-version", python, "--python-platform", PLATFORM,
                   "--output-file", str(output), *(f"--extra={extra}" for extra in extras)]
        if pinned:
            (Path(folder) / "pins.txt").write_text(pins)
            command += ["--constraint", str(Path(folder) / "pins.txt")]
        subprocess.run(command, check=True, cwd=folder)
        rows = [Requirement(line) for line in output.read_text().splitlines() if line and not line.startswith("#")]
    return {canonicalize_name(row.name): str(next(iter(row.specifier)).version) for row in rows}


def resolved_stacks(tested: dict[str, dict[str, str]], tested_python: str) -> dict[str, dict[str, dict[str, str]]]:
    """Each Python's releases of each part: the tested ones for ``tested_python``, checked
    installable from PyPI by a pinned resolution; uv's for the others."""
    everything = tested[WORKFLOW] | tested[TEST]
    stacks = {}
    for python in PYTHONS:
        full = resolve(python, everything, ["test"], pinned=python == tested_python)
        workflow = resolve(python, full, [], pinned=True)
        if python == tested_python and (full, workflow) != (everything, tested[WORKFLOW]):
            raise SystemExit(f"uv's resolution for Python {python} differs from the installed stack: "
                             f"{sorted(set(full.items()) ^ set(everything.items()))}")
        stacks[python] = {WORKFLOW: workflow, TEST: {name: version for name, version in full.items() if name not in workflow}}
    return stacks


def marker(pythons: list[str]) -> str:
    if len(pythons) == len(PYTHONS):
        return ""
    return " ; " + " or ".join(f'python_version == "{python}"' for python in pythons)


def lock_text(stacks: dict[str, dict[str, dict[str, str]]], tested_python: str) -> str:
    """The lock: each part's packages by name, one row per release, marked with the Pythons it
    is for unless it is for all."""
    lines = [LOCK_HEADER.format(pythons=", ".join(PYTHONS), tested=tested_python)]
    for part in (WORKFLOW, TEST):
        lines.append(f"\n# {part}\n")
        names = sorted({name for stack in stacks.values() for name in stack[part]})
        for name in names:
            releases: dict[str, list[str]] = {}
            for python in PYTHONS:
                if name in stacks[python][part]:
                    releases.setdefault(stacks[python][part][name], []).append(python)
            for version in sorted(releases, key=Version):
                lines.append(f"{name}=={version}{marker(releases[version])}\n")
    return "".join(lines)


def lock_rows(text: str, python: str) -> dict[str, dict[str, str]]:
    """The lock's rows for ``python`` by part: name -> version."""
    parts: dict[str, dict[str, str]] = {WORKFLOW: {}, TEST: {}}
    part = None
    for line in text.splitlines():
        if line.startswith("# ") and line[2:] in parts:
            part = parts[line[2:]]
        elif line and not line.startswith("#"):
            row = Requirement(line)
            if not row.marker or row.marker.evaluate({"python_version": python}):
                part[canonicalize_name(row.name)] = str(next(iter(row.specifier)).version)
    return parts


def conda_environment_text(lock: str, python: str) -> str:
    rows = lock_rows(lock, python)[WORKFLOW]
    return CONDA_HEADER.format(tested=python) + "".join(f"      - {name}=={rows[name]}\n" for name in sorted(rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    tested_python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if tested_python not in PYTHONS:
        raise SystemExit(f"the lock is written from Python {', '.join(PYTHONS)}; this is {tested_python}")
    stacks = resolved_stacks(tested_stack(), tested_python)
    lock = lock_text(stacks, tested_python)
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text(lock)
    CONDA_ENVIRONMENT.write_text(conda_environment_text(lock, tested_python))
    print(f"wrote {LOCK.relative_to(REPOSITORY)} ({sum(len(part) for part in stacks[tested_python].values())} "
          f"packages on Python {tested_python}) and {CONDA_ENVIRONMENT.relative_to(REPOSITORY)}")


if __name__ == "__main__":
    main()
